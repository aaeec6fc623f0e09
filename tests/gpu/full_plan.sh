#!/usr/bin/env bash
# The GPU acceptance runs still open, as detached jobs on one H200 (see bg.sh):
#   tests/gpu/full_plan.sh s16      right after the 0.5.16 bundles (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      right after the 0.5.14 bundles (PYTHONPATH=/tmp/site14), when its runs are wanted
#   tests/gpu/bg.sh poll SECONDS    in every later call, back to back (the host is given back after ~30 s
#                                   without a call): states, figures, $OUT/results.tgz
# Open (issue 19): the Kimi-width round trip's batch-16 speedup (>= 1.3x). Session 10's profile: an admission
# (a new request's prefill) costs the same in both servers (~30 ms per prefill batch, CPU-bound: GPU busy 5%),
# and EAGLE-3 admits ~3x as often (with one fixed output length the baseline admits whole cohorts);
# test_roundtrip_gpu.py now times batch 16 at 128 tokens per request and at lengths drawn from 128:896 (its
# docstring says why). Job "kimi", with the GPU to itself: the round trip on Triton (dump 1000 generations,
# train, convert, check, serve, bench bs1 / bs16 x 128 / bs16 x 128:896), then the same
# prepared draft served again with admissions grouped (--max-running-requests 16 --min-free-slots-delay 3, on
# both servers; its figures under out/grouped).
# Done and not re-run here (session 10): bench_serve.py (patches on / off, dump while serving / EAGLE-3), the tiny
# round trips with the retrained-on-serving-dump comparison on 0.5.16 and 0.5.14 (stage s14 keeps the latter).
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
  $BG start kimi "$KRT $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; mkdir -p \$OUT/grouped; \
    OUT=\$OUT/grouped $KRT SGE3_RT_SERVE_ARGS='--max-running-requests 16 --min-free-slots-delay 3' \
    $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start rt14 "$S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
esac
