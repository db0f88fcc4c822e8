#!/bin/sh
test_description='arachne-gpt runs a plan exactly

Under mpirun, one rank per GPU of the cluster, arachne-gpt trains 20 steps
on each plan and must print the losses of the one-process run of the same
seed to 1e-5 relative: an uneven pipeline, TP 2 with two replicas, TP 4,
stages of TP 4, 2 and 1 in one pipeline, two templates of different depth
and TP, a plan that leaves GPUs idle (rank 0 among them), and the plan
arachne-plan makes.  Every communicator a rank makes must be one of the
plan'\''s groups (ARACHNE_GPT_TRACE).'
. "$(dirname "$0")/lib.sh"

require_gpt_mpi

STEPS=20

test_expect_success 'setup: clusters and the one-process references' '
	gpt_clusters &&
	for mbs in 2 4 8; do
		"$ARACHNE_GPT" --model gpt-tiny --steps $STEPS --seed 5 \
			--micro-batch $mbs -q >one-$mbs.out || return 1
	done
'

# plan_case NAME CLUSTER MBS TEMPLATE...: the plan's run equals the
# one-process run, and its communicators are the plan's groups.
plan_case() {
	name=$1 cluster=$2 mbs=$3
	shift 3
	"$GPT_PLAN" --cluster $cluster.json --mbs $mbs "$@" >$name.json &&
	np=$(test $cluster = c8 && echo 8 || echo 4) &&
	ARACHNE_GPT_TRACE=1 gpt_mpi $np --model gpt-tiny --steps $STEPS --seed 5 \
		-q --plan $name.json --cluster $cluster.json >$name.out 2>$name.err &&
	"$GPT_CHECK" losses $name.out one-$mbs.out &&
	"$GPT_CHECK" comms $name.json $cluster.json $name.err
}

test_expect_success 'a pipeline of uneven stages (2, 5, 3 layers), 8 micro-batches' '
	plan_case pp-uneven c4 2 "8:n0:0:0-1/n0:1:2-6/n0:2:7-9"
'

test_expect_success 'TP 2, two replicas' '
	plan_case tp2 c4 2 "4:n0:0,1:0-9+n0:2,3:0-9"
'

test_expect_success 'TP 4' '
	plan_case tp4 c4 4 "4:n0:0,1,2,3:0-9"
'

test_expect_success 'TP 4, 2 and 1 in one pipeline' '
	plan_case mixed-tp c8 2 "8:n0:0,1,2,3:0-3/n1:0,1:4-6/n1:2:7-9"
'

test_expect_success 'two templates of different depth and TP' '
	plan_case two-templates c8 2 "5:n0:0:0-4/n0:1:5-9" \
		"3:n1:0,1:0-2/n1:2:3-7/n1:3:8-9"
'

test_expect_success 'GPUs left idle (rank 0 too), a replica with fewer samples' '
	plan_case idle c4 2 "3:n0:1:0-9+n0:2:0-9+n0:3:0-9" &&
	! grep "rank 0: comm" idle.err
'

test_expect_success 'the plan arachne-plan makes for two nodes' '
	"$ARACHNE_PLAN" --model gpt-tiny --cluster c8.json --format json \
		-o planned.json >/dev/null &&
	mbs=$(python3 -c "import json; print(json.load(open(\"planned.json\"))[\"micro_batch\"])") &&
	if ! test -f one-$mbs.out; then
		"$ARACHNE_GPT" --model gpt-tiny --steps $STEPS --seed 5 \
			--micro-batch $mbs -q >one-$mbs.out
	fi &&
	ARACHNE_GPT_TRACE=1 gpt_mpi 8 --model gpt-tiny --steps $STEPS --seed 5 -q \
		--plan planned.json --cluster c8.json >planned.out 2>planned.err &&
	"$GPT_CHECK" losses planned.out one-$mbs.out &&
	"$GPT_CHECK" comms planned.json c8.json planned.err
'

test_expect_success 'the check fails when one loss differs by 1e-4' '
	awk "\$2 == 20 { \$4 = sprintf(\"%.9f\", \$4 * 1.0001) } 1" tp4.out >bad.out &&
	test_must_fail "$GPT_CHECK" losses bad.out one-4.out
'

test_expect_success 'a plan with TP 8 on a 4-head model is refused' '
	echo "{ \"nodes\": [ { \"gpu\": \"a100-40\", \"gpus_per_node\": 8, \"hosts\": \"n0\" } ] }" >c8x.json &&
	"$GPT_PLAN" --cluster c8x.json --mbs 2 "8:n0:0,1,2,3,4,5,6,7:0-9" >tp8.json &&
	test_expect_code 2 gpt_mpi 8 --model gpt-tiny --steps 2 --seed 5 \
		--plan tp8.json --cluster c8x.json 2>tp8.err &&
	grep "tp8.json: template 0 stage 0 has TP 8; the model.s 4 heads allow TP degrees dividing 4" tp8.err
'

test_done
