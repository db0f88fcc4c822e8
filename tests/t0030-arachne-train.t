#!/bin/sh
test_description='arachne-train and the arachne planner: weights, metadata, plans, bad files'
. "$(dirname "$0")/lib.sh"

ARACHNE_TRAIN="$top_builddir/policy/arachne-train"
check="$SHARNESS_TEST_SRCDIR/plan-check.py"
example="$CLUSTERS/example.json"

# The safetensors header: an 8-byte little-endian length, then JSON.
header() {
	python3 -c 'import json,struct,sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
print(json.dumps(json.loads(b[8:8 + n])["__metadata__"], sort_keys=True))' "$1"
}

test_expect_success 'trains a small policy with metadata' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 3 --compositions 4 \
		--imitation-steps 20 --batch 2 --group 4 --seed 7 --threads 2 \
		--out p.safetensors 2>err &&
	grep "episode 3/3" err &&
	grep "teacher plan on each of 4 compositions" err &&
	grep ", 4 teacher plans," err &&
	header p.safetensors >meta &&
	grep "\"model\": \"llama3-8b\"" meta &&
	grep "\"seed\": \"7\"" meta &&
	grep "\"episodes\": \"3\"" meta &&
	grep "\"feature_version\": \"5\"" meta &&
	grep "\"command\": \"arachne-train --model llama3-8b" meta
'

test_expect_success 'the same seed gives the same weights, whatever the threads' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 3 --compositions 4 \
		--imitation-steps 20 --batch 2 --group 4 --seed 7 --threads 1 -q \
		--out q.safetensors &&
	python3 -c "import sys; a, b = (open(f, \"rb\").read() for f in sys.argv[1:]); h = lambda x: x[8 + int.from_bytes(x[:8], \"little\"):]; sys.exit(h(a) != h(b))" \
		p.safetensors q.safetensors
'

test_expect_success 'the arachne planner plans with those weights' '
	"$ARACHNE_PLAN" --model llama3-8b --cluster "$example" --planner arachne \
		--policy p.safetensors --seed 3 --format json -q >plan.json &&
	python3 "$check" plan.json "$example" &&
	python3 -c "import json; d = json.load(open(\"plan.json\")); assert d[\"planner\"][\"name\"] == \"arachne\"; assert d[\"planner\"][\"plans_priced\"] > 0; assert d[\"predicted\"][\"samples_per_s\"] > 0"
'

test_expect_success 'a truncated policy file is refused with its name' '
	head -c 1000 p.safetensors >short.safetensors &&
	test_expect_code 2 "$ARACHNE_PLAN" --model llama3-8b --cluster "$example" \
		--planner arachne --policy short.safetensors 2>err &&
	grep "short.safetensors: truncated" err
'

test_expect_success 'bad arguments: exit 2 with the option named' '
	test_expect_code 2 "$ARACHNE_TRAIN" --model llama3-8b 2>err &&
	grep "out are required" err &&
	test_expect_code 2 "$ARACHNE_TRAIN" --model llama3-8b --out x --episodes zero 2>err &&
	grep "\-\-episodes" err &&
	test_expect_code 2 "$ARACHNE_TRAIN" --model nosuch --out x 2>err &&
	test_expect_code 2 "$ARACHNE_TRAIN" --model llama3-8b --out x \
		--imitation-steps -1 2>err &&
	grep "\-\-imitation-steps: \"-1\" is not an integer of 0 or more" err &&
	test_expect_code 2 "$ARACHNE_TRAIN" --model llama3-8b --out x --max-gpus 8 2>err &&
	grep "\-\-max-gpus needs 32 to 65536" err
'

test_expect_success 'without a teacher: no teacher plan, the ablation' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 2 --compositions 4 \
		--no-teacher --batch 2 --group 4 --seed 7 --out n.safetensors 2>err &&
	grep ", 0 teacher plans," err &&
	! grep "teacher plan on each" err
'

# The fit report's numbers: "NAME VALUE" per line, for the checks below.
fit_values() {
	sed -n -e "s/.*depth \([0-9.]*\), device \([0-9.]*\), tp \([0-9.]*\); whole plans \([0-9.]*\)/depth \1\ndevice \2\ntp \3\nwhole \4/p" \
	       -e "s/.*greedy construction reaches it on \([0-9.]*\) (geometric mean \([0-9.]*\))/greedy \1\ngreedy_gmean \2/p" \
	       -e "s/.*best of 32 constructions reaches it on \([0-9.]*\) (geometric mean \([0-9.]*\))/best \1\nbest_gmean \2/p" "$1"
}

# After 400 imitation updates on two compositions the policy builds one
# plan whole and three of its four depth decisions (none of them, and a
# quarter of the depths, untrained).
test_expect_success 'the fit report: two imitated compositions are learned, not before' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 1 --compositions 2 \
		--imitation-steps 400 --batch 2 --group 4 --seed 7 -q \
		--out f.safetensors --fit-report >fit &&
	grep "^fit on 2 training compositions" fit &&
	fit_values fit >trained &&
	test $(wc -l <trained) -eq 8 &&
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 1 --compositions 2 \
		--imitation-steps 0 --batch 2 --group 4 --seed 7 -q \
		--out u.safetensors --fit-report >fit0 &&
	fit_values fit0 >untrained &&
	awk "{ v[FILENAME, \$1] = \$2; if (\$2 < 0 || \$2 > 1) bad = 1 }
	     END { t = \"trained\"; u = \"untrained\";
		   exit bad || v[t, \"depth\"] < 0.7 ||
			v[t, \"depth\"] <= v[u, \"depth\"] || v[t, \"greedy\"] < 0.5 ||
			v[t, \"best\"] < v[t, \"greedy\"] ||
			v[t, \"best_gmean\"] < v[t, \"greedy_gmean\"] ||
			v[u, \"greedy_gmean\"] >= v[t, \"greedy_gmean\"] }" trained untrained
'

# Two compositions are learned by heart by update 1500 (loss 6e-5); then
# Adam's steps raise the loss (1e7 by update 4000 without the rollback,
# and the greedy construction falls to 0.33x of the plans it imitates).
test_expect_success 'a rising imitation loss goes back to the lowest window' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 1 --compositions 2 \
		--imitation-steps 4000 --batch 2 --group 4 --seed 7 \
		--out r.safetensors --fit-report >fit 2>err &&
	grep "^imitation loss .* at update [0-9]*, lowest .*: back to update [0-9]*, rate 0.0005$" err &&
	sed -n "s/.*imitation loss per decision .* first, \([0-9.e+-]*\) lowest (update [0-9]*), .* last; \([0-9]*\) rollbacks$/\1 \2/p" err >summary &&
	test $(wc -l <summary) -eq 1 &&
	awk "{ exit !(\$1 < 1e-3 && \$2 >= 1) }" summary &&
	fit_values fit >trained &&
	awk "\$1 == \"greedy_gmean\" { found = 1; if (\$2 < 0.9) bad = 1 }
	     END { exit bad || !found }" trained
'

test_expect_success 'without --fit-report nothing is written on stdout' '
	"$ARACHNE_TRAIN" --model llama3-8b --episodes 1 --compositions 2 \
		--imitation-steps 20 --batch 2 --group 4 --seed 7 -q \
		--out g.safetensors >out &&
	test_must_be_empty out
'

# bench/policy-seeds compares policies on the validation set: the
# geometric mean of samples/s per planning seed over the compositions
# every policy plans at every seed, and over all seeds; a tie goes to the
# first policy named.
POLICY_SEEDS="$top_srcdir/bench/policy-seeds"

test_expect_success 'policy-seeds: two copies of one policy tie, the first is best' '
	cp p.safetensors p2.safetensors &&
	"$POLICY_SEEDS" --model llama3-8b --count 3 --plan "$ARACHNE_PLAN" \
		--profiles "$AR_PROFILES" p.safetensors p2.safetensors >cmp 2>err &&
	grep "^# validation set: unseen-set --count 3 --seed 20261207" cmp &&
	grep "^# 3 compositions, [1-3] planned by every policy at every seed$" cmp &&
	test "$(sed -n "s/^p.safetensors  *//p" cmp)" = \
	     "$(sed -n "s/^p2.safetensors  *//p" cmp)" &&
	grep "^best: p.safetensors$" cmp &&
	test $(grep -c "planning seed [12]: done" err) -eq 4
'

# The numbers are arachne-plan's own: the policy alone on each
# composition of the set, at planning seed 1, in geometric mean.
test_expect_success 'policy-seeds: the measure is the policy alone on the validation set' '
	"$POLICY_SEEDS" --model llama3-8b --count 2 --planning-seeds 1 \
		p.safetensors >cmp 2>/dev/null &&
	grep "^# 2 compositions, 2 planned" cmp &&
	"$top_builddir/bench/unseen-set" --out val --count 2 --seed 20261207 \
		--models llama3-8b >/dev/null &&
	for c in unseen-00 unseen-01; do
		"$ARACHNE_PLAN" --model llama3-8b --cluster val/$c.json \
			--policy p.safetensors --starts rollouts --no-climb \
			--seed 1 --threads 1 -q --format json >$c.json || return 1
	done &&
	python3 -c "import json, math, sys
t = [json.load(open(f))[\"predicted\"][\"samples_per_s\"] for f in sys.argv[2:]]
row = [l.split() for l in open(sys.argv[1]) if l.startswith(\"p.safetensors\")][0]
g = math.exp(sum(map(math.log, t)) / len(t))
sys.exit(not (abs(float(row[1]) - g) <= 0.051 and row[1] == row[2]))" \
		cmp unseen-00.json unseen-01.json
'

test_expect_success 'policy-seeds: a policy the planner refuses stops it, named' '
	test_expect_code 2 "$POLICY_SEEDS" --model llama3-8b --count 2 \
		p.safetensors short.safetensors >cmp 2>err &&
	grep "short.safetensors: truncated" err &&
	test_expect_code 2 "$POLICY_SEEDS" --model llama3-8b 2>err &&
	grep "no policy to compare" err &&
	test_expect_code 2 "$POLICY_SEEDS" p.safetensors 2>err &&
	grep "\-\-model is required" err
'

test_done
