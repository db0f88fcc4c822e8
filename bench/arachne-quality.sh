#!/bin/sh
# arachne-quality.sh - the learned planner against the exhaustive reference
# on the evaluation grid: throughput ratio, planning time, plans priced.
#
#   AR_PROFILES=profiles bench/arachne-quality.sh [EXHAUSTIVE_BUDGET_S]
#
# CELLS="model cluster..." (one model a line) picks other cells.
#
# Run from the top of a built tree.  Cells where exhaustive does not finish
# its search within the budget are marked "(incomplete)": its plan is then
# only the best it found, not the optimum.
set -eu
budget=${1:-60}
plan=./policy/arachne-plan
clusters=${AR_PROFILES:?set AR_PROFILES to the profiles directory}/clusters

cells="${CELLS:-
llama3-8b a100-40+h100-64 a100-40+h100-128 a100-40+h100-256 a100-40+h100-512
llama3-8b 3type-64 3type-128 3type-256 3type-512
llama3-8b ls1 ls2 ls3 ls4 ls5
llama3-8b 4type-48 4type-112 4type-160 4type-168 4type-192
qwen3-32b a100-40+h100-64 a100-40+h100-128 a100-40+h100-256 a100-40+h100-512
qwen3-32b 3type-64 3type-128 3type-256 3type-512
qwen3-32b ls1 ls2 ls3 ls4 ls5
qwen3-64b a100-80+h100-128 a100-80+h100-256 a100-80+h100-512
mixtral-8x7b moe-64 moe-160 moe-256 moe-512
qwen3-30b-a3b moe-64 moe-160 moe-256 moe-512
llama3-8b scale-1024 scale-2048 scale-4096
}"

field() {	# field NAME JSON: a number from the plan JSON's planner/predicted maps
	printf '%s' "$2" | sed -n "s/.*\"$1\": *\([0-9.eE+-]*\).*/\1/p" | head -n 1
}

printf '%-14s %-18s %12s %8s %8s %12s %8s %s\n' model cluster arachne_sps s priced exhaust_sps ratio note
echo "$cells" | while read -r model rest; do
	[ -n "$model" ] || continue
	for c in $rest; do
		a=$($plan --model "$model" --cluster "$clusters/$c.json" \
			--planner arachne --format json -q 2>/dev/null) || a=
		e=$($plan --model "$model" --cluster "$clusters/$c.json" \
			--planner exhaustive --budget-s "$budget" --format json -q \
			2>/dev/null) || e=
		as=$(field samples_per_s "$a"); at=$(field planning_s "$a")
		ap=$(field plans_priced "$a"); es=$(field samples_per_s "$e")
		note=
		printf '%s' "$e" | grep -q '"search_complete": *true' || note="(incomplete)"
		ratio=$(awk -v a="${as:-0}" -v e="${es:-0}" \
			'BEGIN { if (e > 0) printf "%.3f", a / e; else print "-" }')
		printf '%-14s %-18s %12s %8s %8s %12s %8s %s\n' "$model" "$c" \
			"${as:--}" "${at:--}" "${ap:--}" "${es:--}" "$ratio" "$note"
	done
done
