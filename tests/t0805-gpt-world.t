#!/bin/sh
test_description='arachne-gpt over TCP: one job, ranks of two launches

Two mpirun launches, one per node of a two-node cluster (--node n0 and
--node n1), meet in a directory (--world) and train one plan together over
TCP, as the ranks of two Slurm allocations do: a pipeline whose TP-4 stage
is on one launch and whose other stages are on the other, two templates
whose data-parallel sums cross the launches, GPUs left idle on both sides,
and a plan change mid-training whose migration meets in the same
directory.  Every run must print the losses of the one-process run of the
same seed to 1e-5 relative, and make only the plan'\''s communicators.  A
launch that dies ends the other with the reason.'
. "$(dirname "$0")/lib.sh"

require_gpt_mpi

STEPS=20

# world_run NAME ARGS...: arachne-gpt on two launches of four ranks, n0's
# and n1's, meeting in a fresh directory; both must succeed.  Rank 0 (on
# n0) prints the losses to NAME.out.
world_run() {
	name=$1
	shift
	rm -rf w-$name && mkdir w-$name &&
	{ ARACHNE_GPT_TRACE=1 timeout 300 "${MPIRUN:-mpirun}" --oversubscribe \
		--allow-run-as-root -np 4 "$ARACHNE_GPT" --model gpt-tiny \
		--steps $STEPS --seed 5 -q --world w-$name --node n0 "$@" \
		>$name.out 2>$name-n0.err &
	  pid=$!; } &&
	ARACHNE_GPT_TRACE=1 timeout 300 "${MPIRUN:-mpirun}" --oversubscribe \
		--allow-run-as-root -np 4 "$ARACHNE_GPT" --model gpt-tiny \
		--steps $STEPS --seed 5 -q --world w-$name --node n1 "$@" \
		>$name-n1.out 2>$name-n1.err &&
	wait $pid &&
	cat $name-n0.err $name-n1.err >$name.err &&
	test ! -s $name-n1.out
}

# world_case NAME MBS TEMPLATE...: the plan's run over two launches equals
# the one-process run, and its communicators are the plan's groups.
world_case() {
	name=$1 mbs=$2
	shift 2
	"$GPT_PLAN" --cluster c8.json --mbs $mbs "$@" >$name.json &&
	world_run $name --plan $name.json --cluster c8.json &&
	"$GPT_CHECK" losses $name.out one-$mbs.out &&
	"$GPT_CHECK" comms $name.json c8.json $name.err
}

test_expect_success 'setup: the cluster and the one-process references' '
	gpt_clusters &&
	for mbs in 2; do
		"$ARACHNE_GPT" --model gpt-tiny --steps $STEPS --seed 5 \
			--micro-batch $mbs -q >one-$mbs.out || return 1
	done
'

test_expect_success 'a pipeline from a TP-4 stage on n0 to TP 2 and 1 on n1' '
	world_case mixed-tp 2 "8:n0:0,1,2,3:0-3/n1:0,1:4-6/n1:2:7-9"
'

test_expect_success 'two templates, one per launch: their gradient sums cross' '
	world_case two-templates 2 "5:n0:0:0-4/n0:1:5-9" \
		"3:n1:0,1:0-2/n1:2:3-7/n1:3:8-9"
'

test_expect_success 'replicas of TP 2 on both launches, two GPUs idle on each' '
	world_case idle 2 "4:n0:2,3:0-9+n1:0,1:0-9" &&
	! grep "rank 0: comm" idle.err
'

test_expect_success 'a plan change mid-training: n0 sends its state to n1 and idles' '
	"$GPT_PLAN" --cluster c8.json --mbs 2 "4:n1:0,1:0-9+n1:2,3:0-9" \
		>n1-only.json &&
	world_run moved --plan two-templates.json --cluster c8.json \
		--then 10:n1-only.json -v &&
	"$GPT_CHECK" losses moved.out one-2.out &&
	grep "rank 4: migrated after step 10: [1-9][0-9]* bytes in" moved.err &&
	grep "rank 0: migrated after step 10: 0 bytes in" moved.err
'

test_expect_success 'a launch that dies ends the other with the reason' '
	rm -rf w-dead && mkdir w-dead &&
	{ timeout 120 "${MPIRUN:-mpirun}" --oversubscribe --allow-run-as-root \
		-np 4 "$ARACHNE_GPT" --model gpt-tiny --steps 100000 --seed 5 \
		-q --world w-dead --node n0 --plan mixed-tp.json \
		--cluster c8.json >dead.out 2>dead.err & pid=$!; } &&
	{ timeout 120 "${MPIRUN:-mpirun}" --oversubscribe --allow-run-as-root \
		-np 4 "$ARACHNE_GPT" --model gpt-tiny --steps 100000 --seed 5 \
		-q --world w-dead --node n1 --plan mixed-tp.json \
		--cluster c8.json >/dev/null 2>dead-n1.err & pid1=$!; } &&
	ar_wait_until 600 "step 3 in dead.out" grep -q "^step 3 " dead.out &&
	pkill -9 -f -- "--world w-dead --node n1" &&
	{ wait $pid1 || :; } &&
	! wait $pid &&
	cat dead.err &&
	grep "arachne-gpt: rank [0-3]: rank [4-7] is gone" dead.err
'

test_expect_success 'bad input: a node the cluster lacks, --world without a plan' '
	mkdir -p w-bad &&
	test_expect_code 1 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 5 \
		--world w-bad --node n7 --plan mixed-tp.json --cluster c8.json \
		2>bad-node.err &&
	grep "runs on node n7, which the cluster does not have" bad-node.err &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 5 \
		--world w-bad 2>bad-world.err &&
	grep "world needs --plan and --cluster" bad-world.err
'

test_done
