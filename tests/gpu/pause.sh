#!/usr/bin/env bash
# Give a timed run the GPU alone without waiting for the other background jobs (bg.sh) to end: freeze their
# process trees (servers included) now and thaw them when the timed job ends.
#   tests/gpu/pause.sh TIMED_JOB NAME..
# Frozen between server start-ups (the start lock of gpu_helpers.sglang_server is taken first), so the timed
# job's own servers never wait on a frozen neighbour's start-up. A frozen server keeps its GPU memory but no
# compute. The timed job's `bg.sh wait` for NAME.. is ended so it starts at once.
set -u
ROOT=${SGE3_BG_ROOT:-/tmp/sge3_bg}
timed=${1:?usage: pause.sh TIMED_JOB NAME..}; shift
tree() { local p; for p in "$@"; do echo "$p"; tree $(ps -o pid= --ppid "$p"); done; }
pids=""
for n in "$@"; do
  [ -e "$ROOT/$n/rc" ] && continue
  top=$(ps -eo pid=,args= | awk -v d="$ROOT/$n/rc" 'index($0, d) && /bash -c/ {print $1; exit}')
  [ -n "$top" ] && pids="$pids $(tree "$top" | tr '\n' ' ')"
done
exec 9>>"${SGE3_START_LOCK:-/tmp/sge3_gpu_start.lock}"
flock 9
[ -n "${pids// /}" ] && kill -STOP $pids
flock -u 9
echo "frozen:$pids"
# only a `bg.sh wait` process itself: a job's own `bash -c` line may contain the same words
pkill -f "^bash [^ ]*bg\.sh wait .*$*" || true
setsid nohup bash -c "while [ ! -e '$ROOT/$timed/rc' ]; do sleep 2; done; kill -CONT $pids; echo thawed $pids" \
  > "$ROOT/pause_$timed.log" 2>&1 < /dev/null &
