#!/usr/bin/env bash
# The GPU acceptance runs still open, as detached jobs on one H200 (see bg.sh):
#   tests/gpu/full_plan.sh s16      right after the 0.5.16 bundles (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      right after the 0.5.14 bundles (PYTHONPATH=/tmp/site14)
#   tests/gpu/bg.sh poll SECONDS    in every later call, back to back (the host is given back after ~30 s
#                                   without a call): states, figures, $OUT/results.tgz
# Side by side first (accept lengths, training and compiles, not timings): the tiny round trips on 0.5.16 and
# 0.5.14, each followed by the draft retrained on a dump-while-serving run (issue 20), and "kimifi", the
# Kimi-width round trip's preparation on FlashInfer (dump, train, convert, check; FlashInfer's ~3 min JIT
# compile happens here, off the clock).
# Then job "timed", with the GPU to itself (~11 min): it waits for the others until SGE3_ALONE_BY seconds after
# its start, freezes whatever still runs (tests/gpu/pause.sh; continued when "timed" ends), then
#   the Kimi-width round trip's serve + bench on FlashInfer (session 8 on Triton, GPU alone: accept 3.62,
#     2.02x at batch 1 but 0.87x at batch 16; Triton verifies MLA with a serial-prefix extend kernel);
#   benchmarks/bench_serve.py: patches on / off for EAGLE-3 and target-only, dump-while-serving / EAGLE-3;
#   benchmarks/profile_spec.py at batch 16 on Triton: where one speculative iteration's time goes.
# bench_serve and profile_spec use a random draft at the Kimi width: accept length ~1, but every iteration
# still drafts and verifies 4 tokens, so what the patches, the dump and one iteration cost is a trained
# draft's. Shared-GPU timings say little (session 7: 0.81x-1.51x at batch 16 for one tiny round trip).
# Memory: tests/gpu/gpu_helpers.sglang_server starts one server at a time on the host (SGLang sizes its KV
# cache from the memory free at its start); Kimi-width servers get a KV cap (SGLang 0.5.16 gave one EAGLE-3
# server 75 GB of KV at fraction 0.3) and a fraction that only has to clear weights / free memory.
# Not here: the SIGKILL restart test.
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
# the tiny round trips only feed the retrained-on-serving-dump comparison (a ratio of two drafts trained alike):
# 1000 samples (session 7: 2000 samples -> accept 3.98-4.00, loss ~0)
RT="SGE3_RT_SAMPLES=1000"
OTHERS="rt16 rt14 kimifi"
case ${1:?stage} in
s16)
  S="PYTHONPATH=/tmp/site $C"
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.5 SGE3_MAX_TOTAL_TOKENS=65536"
  KRT="$K SGE3_RT_TARGET=kimi SGE3_RT_BACKEND=flashinfer SGE3_RT_DIR=/tmp/rtkf"
  $BG start rt16 "$S $RT SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 SGE3_SRV_DIR=/tmp/srv16 $R tests/gpu/test_dump_serving_gpu.py -k retrained"
  $BG start kimifi "$KRT SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip"
  $BG start timed "$BG wait \$(( ${SGE3_ALONE_BY:-660} - SECONDS )) $OTHERS > /dev/null; \
    tests/gpu/pause.sh timed $OTHERS; echo alone at \$SECONDS s; \
    $KRT $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $K python3 benchmarks/bench_serve.py --rounds 4 --new-tokens 128 --only spec,specdump,base; \
    $K python3 benchmarks/profile_spec.py --bs 16 --attention-backend triton --spec 3,1,4" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start rt14 "$S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S $RT SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py -k retrained" ;;
esac
