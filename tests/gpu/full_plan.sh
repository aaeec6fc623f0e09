#!/usr/bin/env bash
# The GPU acceptance runs still open, as detached jobs on one H200 (see bg.sh):
#   tests/gpu/full_plan.sh s16      right after the 0.5.16 bundles (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      right after the 0.5.14 bundles (PYTHONPATH=/tmp/site14), when its runs are wanted
#   tests/gpu/bg.sh poll SECONDS    in every later call, back to back (the host is given back after ~30 s
#                                   without a call): states, figures, $OUT/results.tgz
# Open (issue 19): the Kimi-width round trip's batch-16 speedup (>= 1.3x). Session 11 (Triton, 0.5.16): bs1 2.03x,
# bs16 x 128:896 1.24x (default admissions), 1.30x / 1.32x with grouped admissions; one iteration at batch 16
# costs 10.1 ms vs a 3.9 ms target-only step. Session 10's profile says where: Triton verifies the MLA target with
# its extend kernel, 4.7 ms of an 11.4 ms iteration (each of the 64 heads re-reads the latent KV; decode's grouped
# kernel: 0.3 ms). Job "kimi", with the GPU to itself: prepare the draft once on Triton (dump 1000 generations,
# train, convert, check), then serve it on FlashMLA (`--attention-backend flashmla`: FlashMLA decodes and verifies,
# FlashInfer prefills - its JIT adds ~3 min to the first start; the draft on Triton), the same with admissions
# grouped, then on FlashInfer at 128:896 (session 9 timed it at 128 only). Figures under out/<stage>/.
# Memory: tests/gpu/gpu_helpers.sglang_server starts one server at a time on the host (SGLang sizes its KV
# cache from the memory free at its start); Kimi-width servers get a KV cap and a fraction that only has to
# clear weights / free memory.
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
# the tiny round trips only feed the retrained-on-serving-dump comparison (a ratio of two drafts trained alike)
RT="SGE3_RT_SAMPLES=${SGE3_RT_SAMPLES:-600}"
case ${1:?stage} in
s16)
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.5 SGE3_MAX_TOTAL_TOKENS=65536"
  KRT="$K SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rtk"
  T=tests/gpu/test_roundtrip_gpu.py::test_roundtrip
  G="SGE3_RT_SERVE_ARGS='--max-running-requests 16 --min-free-slots-delay 3'"
  $BG start kimi "$KRT SGE3_RT_PREPARE_ONLY=1 $R $T; \
    mkdir -p \$OUT/flashmla \$OUT/flashmla_grouped \$OUT/flashinfer; \
    OUT=\$OUT/flashmla $KRT SGE3_RT_SERVE_BACKEND=flashmla $R $T; \
    OUT=\$OUT/flashmla_grouped $KRT SGE3_RT_SERVE_BACKEND=flashmla $G $R $T; \
    OUT=\$OUT/flashinfer $KRT SGE3_RT_SERVE_BACKEND=flashinfer $R $T" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start rt14 "$S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
esac
