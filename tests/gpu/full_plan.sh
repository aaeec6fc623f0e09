#!/usr/bin/env bash
# Every GPU acceptance run of the open issues as detached jobs on one H200 (see bg.sh), in stages so each
# stage starts as soon as its release's bundles are installed:
#   tests/gpu/full_plan.sh s16      jobs on SGLang 0.5.16 (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      jobs on SGLang 0.5.14 (PYTHONPATH=/tmp/site14)
#   tests/gpu/full_plan.sh extra    later additions (Kimi-K2.5 wrapper, bench report)
#   tests/gpu/bg.sh wait SECONDS    figures + $OUT/bg_logs.tgz
# Jobs in one chain run one after another; chains run side by side. Memory: the 16 GB Kimi-width target needs
# --mem-fraction-static > 0.26 (weights and draft are counted); 0.06 left tiny servers without KV room.
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
case ${1:?stage} in
s16)
  S="PYTHONPATH=/tmp/site $C"
  $BG start kimi "PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.3 SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rt $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.25 python3 benchmarks/bench_serve.py --model /tmp/rt/kimi/target --draft /tmp/rt/kimi/draft_sglang --rounds 4 --new-tokens 96"
  $BG start s16a "$S SGE3_TINY_DIR=/tmp/t16a SGE3_BACKENDS=triton $R tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py tests/gpu/test_draft_gpu.py tests/gpu/test_draft_mla_gpu.py"
  $BG start s16b "$S SGE3_TINY_DIR=/tmp/t16b SGE3_BACKENDS=flashinfer,fa3 $R tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py -k 'flashinfer or fa3'; \
    $S SGE3_TINY_DIR=/tmp/t16b $R tests/gpu/test_dump_abort_gpu.py; \
    $S SGE3_TINY_DIR=/tmp/t16b SGE3_RT_DIR=/tmp/none $R tests/gpu/test_dump_serving_gpu.py -k draft_is_fed" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start s14a "$S SGE3_TINY_DIR=/tmp/t14a SGE3_BACKENDS=triton $R tests/gpu/test_dump_gpu.py -k 'dense-triton or moe_pinned-triton or refusal'; \
    $S SGE3_TINY_DIR=/tmp/t14a $R tests/gpu/test_draft_mla_gpu.py; \
    $S SGE3_TINY_DIR=/tmp/t14a SGE3_RT_DIR=/tmp/none $R tests/gpu/test_dump_serving_gpu.py -k draft_is_fed"
  $BG start s14rt "$S SGE3_TINY_DIR=/tmp/t14rt SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip" ;;
extra)
  S="PYTHONPATH=/tmp/site $C"
  $BG start kimi_wrapper "$S SGE3_TINY_DIR=/tmp/tk $R tests/gpu/test_kimi_gpu.py"
  $BG start bench_report "$S SGE3_TINY_DIR=/tmp/tb SGE3_RT_DIR=/tmp/rt16b $R tests/gpu/test_bench_gpu.py" ;;
esac
