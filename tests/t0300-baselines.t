#!/bin/sh
test_description='arachne-plan: the five baseline planners end to end'
. "$(dirname "$0")/lib.sh"

BASELINES="amp sailor metis hexiscale espresso"

test -r "$AR_PROFILES/layers/llama3-8b/h100.ini" &&
test -r "$AR_PROFILES/layers/qwen3-32b/a6000.ini" &&
	test_set_prereq PROFILES
command -v jq >/dev/null 2>&1 && test_set_prereq JQ

test_expect_success 'write the test clusters' '
	cat >two.json <<-\EOT &&
	{ "name": "two", "nodes": [
	  { "gpu": "a100-40", "gpus_per_node": 4, "hosts": "a[1-2]" },
	  { "gpu": "h100", "gpus_per_node": 4, "hosts": "h[1-2]" } ] }
	EOT
	cat >large.json <<-\EOT &&
	{ "name": "large", "nodes": [
	  { "gpu": "a100-40", "gpus_per_node": 4, "count": 32 },
	  { "gpu": "a6000", "gpus_per_node": 4, "count": 32 },
	  { "gpu": "h100", "gpus_per_node": 4, "count": 64 } ] }
	EOT
	cat >tiny.json <<-\EOT
	{ "name": "tiny", "nodes": [
	  { "gpu": "a6000", "gpus_per_node": 1, "count": 1 } ] }
	EOT
'

for p in $BASELINES; do
	test_expect_success PROFILES,JQ "$p plans, names itself and counts plans" '
		"$ARACHNE_PLAN" --model llama3-8b --cluster two.json \
			--planner '$p' --budget-s 10 --format json >'$p'.json &&
		test "$(jq -r .planner.name '$p'.json)" = '$p' &&
		test "$(jq ".planner.plans_priced > 0" '$p'.json)" = true &&
		test "$(jq ".predicted.samples_per_s > 0" '$p'.json)" = true
	'
	test_expect_success PROFILES,JQ "$p plan prices the same when read back" '
		"$ARACHNE_PLAN" --model llama3-8b --cluster two.json \
			--evaluate '$p'.json --format json >'$p'-again.json &&
		a=$(jq .predicted.samples_per_s '$p'.json) &&
		b=$(jq .predicted.samples_per_s '$p'-again.json) &&
		awk -v a="$a" -v b="$b" "BEGIN { d = a - b; if (d < 0) d = -d;
			exit !(d <= 1e-3 * a) }"
	'
	test_expect_success PROFILES,JQ "$p returns within 2 s of a 1-s budget" '
		start=$(date +%s.%N) &&
		"$ARACHNE_PLAN" --model llama3-8b --cluster large.json \
			--planner '$p' --budget-s 1 --format json >'$p'-large.json &&
		end=$(date +%s.%N) &&
		awk -v s="$start" -v e="$end" "BEGIN { exit !(e - s < 2.0) }"
	'
	test_expect_success PROFILES "$p says why when nothing fits (exit 1)" '
		test_expect_code 1 "$ARACHNE_PLAN" --model qwen3-32b \
			--cluster tiny.json --planner '$p' --budget-s 5 \
			2>'$p'.err &&
		grep "'$p'" '$p'.err
	'
done

test_done
