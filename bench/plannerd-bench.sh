#!/bin/sh
# plannerd-bench.sh - daemon load: cached plan requests per second with
# their p99, and what a cold plan costs beyond the planner's own time.
#
# Usage: bench/plannerd-bench.sh [SECONDS]   (or `make bench-plannerd`)
# Starts a private plannerd in a temporary directory with the toy profiles
# of the system tests, and prints a small report.  Targets (issue 6):
# >= 5,000 cached plan requests/s with p99 < 5 ms; a cold plan adds < 10 ms.
# BENCH_STATE_DIR=/dev/shm/x puts the plan store on tmpfs, which separates
# the daemon's own overhead from the disk's fsync latency.
set -eu
: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_srcdir:=$top_builddir}"
seconds=${1:-5}
# The system tests' helpers: a short socket directory, clean-up at exit
# (which ends in sharness's die), bounded waits, the toy daemon.
die() { exit "$?"; }
. "$top_srcdir/tests/sharness.d/arachne.sh"
. "$top_srcdir/tests/sharness.d/plannerd.sh"
LOAD="$top_builddir/plannerd/plannerd-load"

work=$(mktemp -d /tmp/plannerd-bench.XXXXXX)
ar_at_exit 'rm -rf "$work"'
cd "$work"
plannerd_profiles profiles
plannerd_config plannerd.conf 'log_level = "notice";' 'budget_s = 30.0;'
sed -i '/log_level = "debug"/d; /budget_s = 5.0/d' plannerd.conf
if [ -n "${BENCH_STATE_DIR:-}" ]; then
	sed -i '/^state_dir/d' plannerd.conf
	echo "state_dir = \"$BENCH_STATE_DIR\";" >>plannerd.conf
fi
plannerd_start

cluster='{"nodes":[{"gpu":"fast","gpus_per_node":2,"count":1},{"gpu":"slow","gpus_per_node":2,"count":1}]}'
printf '%s\n' "$cluster" >cluster.json
printf '{"op":"plan","job":"bench","user":"root","model":"toy","cluster":%s}\n' "$cluster" >same-job
printf '{"op":"plan","job":"j$JOB","user":"root","model":"toy","cluster":%s}\n' "$cluster" >new-jobs
ctl plan bench --model toy --cluster cluster.json >/dev/null

echo "== plannerd bench: $(nproc) CPUs, load average $(cut -d" " -f1 /proc/loadavg), ${seconds} s per load case, store in ${BENCH_STATE_DIR:-$work/state}"
echo "-- cached plan, same job (answered on the I/O loop), 8 clients:"
"$LOAD" -s "$PLANNERD_SOCK" -c 8 -t 2 -d "$seconds" same-job
echo "-- cached plan, a new job each time (stored with fsync), 8 clients:"
"$LOAD" -s "$PLANNERD_SOCK" -c 8 -t 2 -d "$seconds" new-jobs
echo "-- cold plans: client latency minus the planner's planning_s, 40 plans:"
python3 - "$PLANNERD_SOCK" cluster.json <<'PY'
import json, socket, sys, time
path, cluster = sys.argv[1], json.load(open(sys.argv[2]))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
f = s.makefile("rwb")
over, plan_s = [], []
for i in range(40):
    # a new network bandwidth each time: no cache can answer, while the
    # loaded model (loaded once per model, batch and sequence length) is
    # reused as it is in service
    cluster["inter_node_gbps"] = 100 + i
    req = {"op": "plan", "job": "cold%d" % i, "user": "root",
           "model": "toy", "cluster": cluster}
    t0 = time.perf_counter()
    f.write((json.dumps(req) + "\n").encode())
    f.flush()
    a = json.loads(f.readline())
    wall = time.perf_counter() - t0
    assert a["ok"] and not a["cached"], a
    plan_s.append(a["plan"]["planner"]["planning_s"])
    over.append(wall - plan_s[-1])
over.sort()
print(json.dumps({"plans": len(over),
                  "planning_s_median": sorted(plan_s)[len(plan_s) // 2],
                  "overhead_ms_median": round(over[len(over) // 2] * 1e3, 3),
                  "overhead_ms_p99": round(over[int(len(over) * 0.99)] * 1e3, 3),
                  "overhead_ms_max": round(over[-1] * 1e3, 3)}))
PY
plannerd_stop
