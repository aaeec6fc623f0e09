#!/usr/bin/env bash
# Background GPU jobs that outlive one device call (a held host keeps them running between calls),
# so independent GPU tests run side by side instead of one 10-minute call after another.
#   tests/gpu/bg.sh start NAME 'COMMAND'   run COMMAND detached (setsid) with OUT=/tmp/sge3_bg/NAME/out
#   tests/gpu/bg.sh wait SECONDS [NAME..]   wait until those jobs (default: all) end or SECONDS pass; collect
#   tests/gpu/bg.sh collect                 each job's exit status and log tail; every log into $OUT/bg_logs.tgz
set -u
ROOT=${SGE3_BG_ROOT:-/tmp/sge3_bg}
verb=${1:?usage: bg.sh start NAME CMD | wait SECONDS [NAME..] | collect}; shift
case $verb in
start)
  d=$ROOT/$1; mkdir -p "$d/out"; rm -f "$d/rc"
  OUT=$d/out setsid nohup bash -c "( $2 ); echo \$? > '$d/rc'" >"$d/log" 2>&1 </dev/null &
  echo "started $1 (pid $!)" ;;
wait)
  end=$((SECONDS + $1)); shift
  names=${*:-$(ls "$ROOT")}
  while [ $SECONDS -lt $end ]; do
    left=0; for n in $names; do [ -e "$ROOT/$n/rc" ] || left=1; done
    [ $left = 0 ] && break; sleep 5
  done
  exec "$0" collect ;;
collect)
  for d in "$ROOT"/*/; do
    n=$(basename "$d"); echo "== $n: $( [ -e "$d/rc" ] && echo "exit $(cat "$d/rc")" || echo running)"
    grep -E "passed|failed|error" "$d/log" | tail -n 3
    # the figures the tests and benchmarks print (cosines, accept lengths, speedups, cost ratios)
    grep -E "^(dump vs transformers|round trip \[|[a-z_]+/[a-z_]+ bs[0-9]+: )" "$d/log" | sort -u | head -n 40
  done
  [ -n "${OUT:-}" ] && tar czf "$OUT/bg_logs.tgz" -C "$ROOT" . 2>/dev/null; true ;;
esac
