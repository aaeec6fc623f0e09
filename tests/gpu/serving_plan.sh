#!/usr/bin/env bash
# Issue 19's GPU figures in one go (production serving settings: CUDA graphs on; Triton and FlashInfer;
# the Kimi-width round trip's speedup; the patches' cost), as detached jobs that outlive a device call:
#   call 1:  tests/gpu/serving_plan.sh [WAIT_S=540]     starts every job, waits, prints what is done
#   call 2:  tests/gpu/bg.sh wait 580                   waits for the rest; figures + $OUT/bg_logs.tgz
# Needs SGLang 0.5.16 at /tmp/site and 0.5.14 at /tmp/site14 (bundles installed, speculators in both).
# Jobs (side by side on one H200; GPU memory: 4 x <= 8 GB + the Kimi chain's <= 3 x 28 GB; disk ~45 GB):
#   s16_triton      0.5.16, Triton: dump vs transformers (4 variants), SIGKILL resume, prefill-graph refusal,
#                   launcher README run, draft GPU tests                                       ~7 min
#   s16_flashinfer  0.5.16, FlashInfer (fa3 skipped without its kernels): dump vs transformers  ~6 min (JIT ~3)
#   s14_triton      0.5.14, Triton: dump vs transformers (dense, pinned MoE), refusal under its defaults
#                   (tc_piecewise prefill for DeepSeek-V3) and explicit                        ~4 min
#   s14_rt          0.5.14, the 1024-wide round trip (accept length, greedy identity)            ~7 min
#   kimi            0.5.16: Kimi-width round trip (10-layer 16 GB target drawn on the GPU, dump 1000 samples,
#                   train < 2 min, serve, bench at batch 1 and 16) ~10 min, then benchmarks/bench_serve.py
#                   with its trained draft (5 servers, 4 interleaved rounds)                  ~7 min
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
# one tiny-target folder per job: two jobs making the same one at first use would race
COMMON="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache}"
S16="PYTHONPATH=/tmp/site $COMMON"
S14="PYTHONPATH=/tmp/site14 $COMMON SGE3_TINY_DIR=/tmp/tiny14"
SMALL="SGE3_MEM_FRACTION=0.06"
$BG start s16_triton "$S16 $SMALL SGE3_TINY_DIR=/tmp/tiny16t SGE3_BACKENDS=triton tests/gpu/run.sh tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py tests/gpu/test_draft_gpu.py"
$BG start s16_flashinfer "$S16 $SMALL SGE3_TINY_DIR=/tmp/tiny16f SGE3_BACKENDS=flashinfer,fa3 tests/gpu/run.sh tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py -k 'flashinfer or fa3'"
$BG start s14_triton "$S14 $SMALL SGE3_BACKENDS=triton tests/gpu/run.sh tests/gpu/test_dump_gpu.py -k 'dense-triton or moe_pinned-triton or refusal'"
$BG start s14_rt "$S14 $SMALL SGE3_RT_DIR=/tmp/rt14 tests/gpu/run.sh tests/gpu/test_roundtrip_gpu.py::test_roundtrip"
$BG start kimi "$S16 SGE3_MEM_FRACTION=0.3 SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rt tests/gpu/run.sh tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
  $S16 SGE3_MEM_FRACTION=0.2 python3 benchmarks/bench_serve.py --model /tmp/rt/kimi/target --draft /tmp/rt/kimi/draft_sglang --rounds 4 --new-tokens 96"
exec $BG wait "${1:-540}"
