#!/bin/sh
# budget-bench.sh - whether a planning budget binds on huge clusters: the
# wall time of arachne-plan, the whole program, for 1,024 to 65,536
# single-GPU h100 nodes (budget 2 s) and for 10,000 node groups of eight
# GPU types and four node sizes (budget 10 s), for every planner, and the
# overrun beyond the budget.  Target (issue 16): overrun <= 100 ms at
# every size.  A planner that finishes its search early has no overrun.
# cpu_s is the CPU time the program used (user + system): on a loaded
# machine wall_s minus cpu_s is time spent waiting for a core.
#
# Usage: bench/budget-bench.sh [PLANNER...]   (or `make bench-budget`)
# BENCH_SIZES overrides the node counts, BENCH_BUDGET_S the 2 s budget,
# BENCH_GROUPS_BUDGET_S the 10 s one (whole seconds).  Prints a table;
# exits 1 when an overrun exceeds 100 ms or a planner fails other than
# with exit 1 (no plan found within the budget).
set -eu
: "${top_builddir:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${top_srcdir:=$top_builddir}"
: "${AR_PROFILES:=$top_srcdir/profiles}"
: "${ARACHNE_PLAN:=$top_builddir/policy/arachne-plan}"
: "${BENCH_SIZES:=1024 4096 16384 32768 65536}"
: "${BENCH_BUDGET_S:=2}"
: "${BENCH_GROUPS_BUDGET_S:=10}"
export AR_PROFILES
planners=${*:-arachne amp sailor metis hexiscale espresso exhaustive random}

work=$(mktemp -d /tmp/budget-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
for n in $BENCH_SIZES; do
	printf '{"nodes":[{"gpu":"h100","gpus_per_node":1,"count":%d}]}\n' \
		"$n" >"$work/single-$n.json"
done
awk 'BEGIN {
	split("h100 h200 a100-80 a100-40 l40s a6000 a5000 rtx-pro-6000", g, " ");
	printf "{\"nodes\":[";
	for (i = 0; i < 10000; i++)
		printf "%s{\"gpu\":\"%s\",\"gpus_per_node\":%d,\"count\":1}",
		       i ? "," : "", g[i % 8 + 1], 2 ^ (int(i / 8) % 4);
	print "]}";
}' >"$work/groups-10000.json"

now() { date +%s.%N; }
bad=0
printf '%-12s %-11s %8s %8s %6s %10s  %s\n' cluster planner budget_s wall_s cpu_s overrun_ms result
for c in $(for n in $BENCH_SIZES; do echo "single-$n"; done) groups-10000; do
	budget=$BENCH_BUDGET_S
	case $c in groups-*) budget=$BENCH_GROUPS_BUDGET_S ;; esac
	for p in $planners; do
		# A planner that ignores its budget is stopped at 5 x + 30 s.
		t0=$(now)
		if /usr/bin/time -f '%U %S' -o "$work/cpu" \
			timeout $((budget * 5 + 30)) "$ARACHNE_PLAN" --model llama3-8b --cluster "$work/$c.json" \
			--planner "$p" --budget-s "$budget" >/dev/null 2>"$work/err"; then
			result=ok
		else
			rc=$?
			result="exit $rc: $(tail -1 "$work/err")"
			[ "$rc" = 1 ] || bad=1
		fi
		t1=$(now)
		cpu=$(awk '/^[0-9.]+ [0-9.]+$/ { printf "%.2f", $1 + $2 }' "$work/cpu")
		line=$(awk -v a="$t0" -v b="$t1" -v B="$budget" 'BEGIN {
			w = b - a; o = (w - B) * 1000; if (o < 0) o = 0;
			printf "%8.3f %9.0f %d", w, o, (o > 100) }')
		set -- $line
		[ "$3" = 0 ] || bad=1
		printf '%-12s %-11s %8s %8s %6s %10s  %s\n' "$c" "$p" "$budget" "$1" "$cpu" "$2" "$result"
	done
done
exit $bad
