#!/usr/bin/env bash
# One device call's worth of waiting on bg.sh jobs: the host is given back after ~30 s without a call, and
# everything on it is lost (session 8 lost a host that way), so poll with calls back to back:
#   tests/gpu/poll.sh SECONDS     wait up to SECONDS (less if every job has ended); each job's state and newest
#                                 log line; every job's JSON results into $OUT/results.tgz (one file comes back)
set -u
ROOT=${SGE3_BG_ROOT:-/tmp/sge3_bg}
end=$((SECONDS + ${1:-200}))
while [ $SECONDS -lt $end ]; do
  left=0; for d in "$ROOT"/*/; do [ -e "$d/rc" ] || left=1; done
  [ $left = 0 ] && break; sleep 5
done
date -u +%H:%M:%S
for d in "$ROOT"/*/; do
  n=$(basename "$d"); echo "== $n: $( [ -e "$d/rc" ] && echo "exit $(cat "$d/rc")" || echo running)"
  f=$(ls -t "$d"/out/*.log 2>/dev/null | head -1)
  [ -n "$f" ] && echo "   $(basename "$f"): $(tr -d '\000' < "$f" | tail -c 240 | tr '\r\n' '  ')"
  grep -aE "^(round trip \[|[a-z_0-9]+/[a-z_]+ bs[0-9]+: |alone at )" "$d/log" 2>/dev/null | sort -u | head -n 20
done
if [ -n "${OUT:-}" ]; then
  (cd "$ROOT" && ls -d */out/*.json 2>/dev/null | tar czf "$OUT/results.tgz" -T - 2>/dev/null)
  for d in "$ROOT"/*/; do tr -d '\000' < "$d/log" | tail -c 20000 > "$OUT/$(basename "$d").log.txt"; done
fi
true
