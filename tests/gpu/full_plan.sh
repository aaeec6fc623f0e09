#!/usr/bin/env bash
# The GPU acceptance runs still open, as detached jobs on one H200 (see bg.sh):
#   tests/gpu/full_plan.sh s16      right after the 0.5.16 bundles (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      right after the 0.5.14 bundles (PYTHONPATH=/tmp/site14)
#   tests/gpu/bg.sh poll SECONDS    in every later call, back to back (the host is given back after ~30 s
#                                   without a call): states, figures, $OUT/results.tgz
# Timed work first, with the GPU to itself (session 9: jobs frozen with SIGSTOP kept their GPU memory and a
# half-trained preparation was redone; no freezing now):
#   job "timed": benchmarks/bench_serve.py (issue 19: patches on / off for EAGLE-3 and target-only >= 0.99;
#     issue 20: dump-while-serving / EAGLE-3 >= 0.95 at batch 16, Kimi width), then benchmarks/profile_spec.py
#     at batch 16 (session 9: the Kimi-width round trip lost batch 16 to admissions, ~47 ms per prefill batch vs
#     ~4 ms target-only; its iteration and admission costs from the logs, its CPU ops and kernels).
# Then, once "timed" is done (or after SGE3_TIMED_WAIT seconds), side by side (accept lengths, not timings):
#   the tiny round trips on 0.5.16 and 0.5.14, each followed by the draft retrained on a dump-while-serving run
#   (issue 20), 600 dumped generations each (the Kimi-K2.5 wrapper round trip: 600 -> accept 3.97-4.00).
# bench_serve and profile_spec use a random draft at the Kimi width: accept length ~1, but every iteration
# still drafts and verifies 4 tokens, and every admission still runs the draft's extend.
# Memory: tests/gpu/gpu_helpers.sglang_server starts one server at a time on the host (SGLang sizes its KV
# cache from the memory free at its start); Kimi-width servers get a KV cap and a fraction that only has to
# clear weights / free memory.
# Not here: the SIGKILL restart test; the Kimi-width round trip (measured in session 9 on Triton and FlashInfer).
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
# the tiny round trips only feed the retrained-on-serving-dump comparison (a ratio of two drafts trained alike)
RT="SGE3_RT_SAMPLES=${SGE3_RT_SAMPLES:-600}"
AFTER_TIMED="$BG wait \$(( ${SGE3_TIMED_WAIT:-660} - SECONDS )) timed > /dev/null; echo start at \$SECONDS s;"
case ${1:?stage} in
s16)
  S="PYTHONPATH=/tmp/site $C"
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.5 SGE3_MAX_TOTAL_TOKENS=65536"
  $BG start timed "$K python3 benchmarks/bench_serve.py --rounds 4 --new-tokens 128 --only spec,specdump,base; \
    $K python3 benchmarks/profile_spec.py --bs 16 --attention-backend triton --spec 3,1,4"
  $BG start rt16 "$AFTER_TIMED $S $RT SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 SGE3_SRV_DIR=/tmp/srv16 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start rt14 "$AFTER_TIMED $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
esac
