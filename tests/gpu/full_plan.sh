#!/usr/bin/env bash
# Every GPU acceptance run of the open issues as detached jobs on one H200 (see bg.sh), in stages so each
# stage starts as soon as its release's bundles are installed:
#   tests/gpu/full_plan.sh s16      jobs on SGLang 0.5.16 (PYTHONPATH=/tmp/site)
#   tests/gpu/full_plan.sh s14      jobs on SGLang 0.5.14 (PYTHONPATH=/tmp/site14)
#   tests/gpu/bg.sh wait SECONDS    figures + $OUT/bg_logs.tgz
# Jobs in one chain run one after another; chains run side by side. The timed runs (the Kimi-width round trip's
# speedup, benchmarks/bench_serve.py's ratios) wait until every other job has ended (or SGE3_ALONE_BY seconds
# after the kimiw job started): a GPU shared with other processes slows speculation's many small launches and
# CPU syncs far more than a target step's single graph replay, so shared-GPU speedups say little.
# Memory: the 16 GB Kimi-width target needs --mem-fraction-static > 0.26 (SGLang sizes it from the memory free
# at start-up; weights and draft count); 0.06 left tiny servers without KV room.
set -u
cd "$(dirname "$0")/../.."
BG=tests/gpu/bg.sh
C="TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton_cache} SGE3_MEM_FRACTION=0.08"
R=tests/gpu/run.sh
OTHERS="s16a s16b kimi16 rt16 kimi14 rt14"
case ${1:?stage} in
s16)
  S="PYTHONPATH=/tmp/site $C"
  K="PYTHONPATH=/tmp/site TRITON_CACHE_DIR=/tmp/triton_cache SGE3_MEM_FRACTION=0.3 SGE3_RT_TARGET=kimi SGE3_RT_DIR=/tmp/rtk"
  $BG start kimiw "$K SGE3_RT_PREPARE_ONLY=1 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $BG wait \$(( ${SGE3_ALONE_BY:-840} - SECONDS )) $OTHERS > /dev/null; echo alone at \$SECONDS s; \
    $K $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $K python3 benchmarks/bench_serve.py --model /tmp/rtk/kimi/target --draft /tmp/rtk/kimi/draft_sglang --rounds 5 --new-tokens 128"
  $BG start s16a "$S SGE3_TINY_DIR=/tmp/t16a SGE3_BACKENDS=triton $R tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py tests/gpu/test_draft_gpu.py tests/gpu/test_draft_mla_gpu.py"
  $BG start s16b "$S SGE3_TINY_DIR=/tmp/t16b SGE3_BACKENDS=flashinfer,fa3 $R tests/gpu/test_dump_gpu.py tests/gpu/test_launch_gpu.py -k 'flashinfer or fa3'; \
    $S SGE3_TINY_DIR=/tmp/t16b $R tests/gpu/test_dump_abort_gpu.py"
  $BG start kimi16 "$S SGE3_TINY_DIR=/tmp/tk16 SGE3_KIMI_RT_DIR=/tmp/krt16 $R tests/gpu/test_kimi_gpu.py"
  # the round trip's trained draft then feeds the equality test (more accepted rows than a random draft) and
  # the retrained-on-serving-dump comparison
  $BG start rt16 "$S SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S SGE3_TINY_DIR=/tmp/t16r SGE3_RT_DIR=/tmp/rt16 SGE3_SRV_DIR=/tmp/srv16 $R tests/gpu/test_dump_serving_gpu.py" ;;
s14)
  S="PYTHONPATH=/tmp/site14 $C"
  $BG start kimi14 "$S SGE3_TINY_DIR=/tmp/tk14 SGE3_KIMI_RT_DIR=/tmp/krt14 $R tests/gpu/test_kimi_gpu.py"
  $BG start rt14 "$S SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 $R tests/gpu/test_roundtrip_gpu.py::test_roundtrip; \
    $S SGE3_TINY_DIR=/tmp/t14r SGE3_RT_DIR=/tmp/rt14 SGE3_SRV_DIR=/tmp/srv14 $R tests/gpu/test_dump_serving_gpu.py" ;;
esac
