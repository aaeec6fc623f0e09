#!/usr/bin/env bash
# Background GPU jobs that outlive one shell command (a host that stays up keeps them running between commands),
# so independent GPU tests run side by side instead of one 10-minute call after another.
#   tests/gpu/bg.sh start NAME 'COMMAND'   run COMMAND detached (setsid) with OUT=/tmp/sge3_bg/NAME/out
#   tests/gpu/bg.sh wait SECONDS [NAME..]   wait until those jobs (default: all) end or SECONDS pass; collect
#   tests/gpu/bg.sh collect                 each job's state and figures; every log into $OUT/bg_logs.tgz
#   tests/gpu/bg.sh poll SECONDS            wait up to SECONDS (a host released when idle loses its jobs: poll
#                                           back to back), then: states, figures, each job's newest log line, the
#                                           disk and GPU memory in use; every job's JSON results into
#                                           $OUT/results.tgz and its log tail into $OUT
set -u
ROOT=${SGE3_BG_ROOT:-/tmp/sge3_bg}
verb=${1:?usage: bg.sh start NAME CMD | wait SECONDS [NAME..] | collect | poll SECONDS}; shift

wait_jobs() {   # wait_jobs SECONDS [NAME..]: until those jobs (default: all) have an exit status
  local end=$((SECONDS + $1)); shift
  local names=${*:-$(cd "$ROOT" && ls -d */ | tr -d /)} left n   # job folders only (a log file beside them is no job)
  while [ $SECONDS -lt $end ]; do
    left=0; for n in $names; do [ -e "$ROOT/$n/rc" ] || left=1; done
    [ $left = 0 ] && break; sleep 5
  done
}

states() {      # states [newest]: each job's exit status and figures (and its newest log line)
  local d n f
  for d in "$ROOT"/*/; do
    n=$(basename "$d"); echo "== $n: $( [ -e "$d/rc" ] && echo "exit $(cat "$d/rc")" || echo running)"
    if [ "${1:-}" = newest ]; then
      f=$(ls -t "$d"/out/*.log 2>/dev/null | head -1)
      [ -n "$f" ] && echo "   $(basename "$f"): $(tr -d '\000' < "$f" | tail -c 240 | tr '\r\n' '  ')"
    fi
    grep -aE "passed|failed|error" "$d/log" | tail -n 3
    # the figures the tests and benchmarks print (cosines, accept lengths, speedups, cost ratios)
    grep -aE "^(dump vs transformers|round trip \[|[a-z_0-9]+/[a-z_]+ bs[0-9]+: |start at )" "$d/log" | sort -u | head -n 40
    # the lifecycle tests' one-line figures (printed under pytest -s, the first one after the test's id)
    grep -aoE "(eval|swap|refresh|first run) \[[^]]*\].*" "$d/log" | cut -c1-600 | head -n 40
    grep -aoE "\[(table|tune|build)\].*" "$d/log" | cut -c1-300 | head -n 40
  done
}

case $verb in
start)
  d=$ROOT/$1; mkdir -p "$d/out"; rm -f "$d/rc"
  OUT=$d/out setsid nohup bash -c "( $2 ); echo \$? > '$d/rc'" >"$d/log" 2>&1 </dev/null &
  echo "started $1 (pid $!)" ;;
wait)
  wait_jobs "$@"
  exec "$0" collect ;;
collect)
  states
  [ -n "${OUT:-}" ] && tar czf "$OUT/bg_logs.tgz" -C "$ROOT" . 2>/dev/null; true ;;
poll)
  wait_jobs "${1:-200}"
  date -u +%H:%M:%S
  df -h /tmp /dev/shm 2>/dev/null | awk 'NR == 1 || !seen[$0]++'
  nvidia-smi --query-gpu=memory.used,memory.total,utilization.gpu --format=csv,noheader 2>/dev/null
  states newest
  if [ -n "${OUT:-}" ]; then
    (cd "$ROOT" && ls -d */out/*.json */out/ledger/*.json 2>/dev/null | tar czf "$OUT/results.tgz" -T - 2>/dev/null)
    for d in "$ROOT"/*/; do tr -d '\000' < "$d/log" | tail -c 20000 > "$OUT/$(basename "$d").log.txt"; done
  fi
  true ;;
esac
