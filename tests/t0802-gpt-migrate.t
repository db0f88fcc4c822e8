#!/bin/sh
test_description='arachne-gpt moves its live state when the plan changes

Runs that change plan after step 10 of 20 (--then) move weights, Adam
moments and step counters through libarachne-migrate and must print the
losses of the uninterrupted one-process run to 1e-5 relative: 4 -> 8 ranks
(TP 2 replicas to a pipeline of TP 4 and 2), 8 -> 4, TP 2 -> 4 -> a
pipeline, and a template dropped.  A rank killed or stalled during the
migration stops every rank with the reason, and the old state is intact: the
checkpoint written before the migration resumes the run to the same losses.'
. "$(dirname "$0")/lib.sh"

require_gpt_mpi

STEPS=20

test_expect_success 'setup: plans and the one-process reference' '
	gpt_clusters &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "4:n0:0,1:0-9+n0:2,3:0-9" >four.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 \
		"8:n0:0,1,2,3:0-3/n1:0,1:4-6/n1:2,3:7-9" >eight.json &&
	"$GPT_PLAN" --cluster c4.json --mbs 2 "4:n0:0,1:0-9+n0:2,3:0-9" >tp2.json &&
	"$GPT_PLAN" --cluster c4.json --mbs 2 "8:n0:0,1,2,3:0-9" >tp4.json &&
	"$GPT_PLAN" --cluster c4.json --mbs 2 "8:n0:0:0-1/n0:1:2-6/n0:2,3:7-9" >pipe.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "5:n0:0:0-4/n0:1:5-9" \
		"3:n1:0,1:0-2/n1:2:3-7/n1:3:8-9" >two.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "8:n0:0:0-4/n0:1:5-9" >one.json &&
	"$ARACHNE_GPT" --model gpt-tiny --steps $STEPS --seed 9 --micro-batch 2 \
		-q >ref.out
'

# moved NAME NP CLUSTER ARGS...: a run with plan changes matches ref.out.
moved() {
	name=$1 np=$2 cluster=$3
	shift 3
	gpt_mpi $np --model gpt-tiny --steps $STEPS --seed 9 -q -v \
		--cluster $cluster.json "$@" >$name.out 2>$name.err &&
	"$GPT_CHECK" losses $name.out ref.out
}

test_expect_success '4 -> 8 ranks: the joiners start empty and receive' '
	moved grow 8 c8 --plan four.json --then 10:eight.json &&
	test "$(grep -c "migrated after step 10" grow.err)" -eq 8 &&
	grep "rank 5: migrated after step 10: [1-9][0-9]* bytes in, old state cbf29ce484222325" grow.err
'

test_expect_success '8 -> 4 ranks: the leavers send and are done' '
	moved shrink 8 c8 --plan eight.json --then 10:four.json &&
	grep "rank 5: migrated after step 10: 0 bytes in" shrink.err
'

test_expect_success 'TP 2 -> TP 4 -> a pipeline of TP 1, 1 and 2' '
	moved tp 4 c4 --plan tp2.json --then 7:tp4.json --then 14:pipe.json &&
	test "$(grep -c "migrated after step 7" tp.err)" -eq 4 &&
	test "$(grep -c "migrated after step 14" tp.err)" -eq 4
'

test_expect_success 'a template dropped: two templates -> the first alone' '
	moved drop 8 c8 --plan two.json --then 10:one.json
'

# A fault in the migration after step 10: every rank must stop, none may
# print a step after 10, and one survivor at least says why.
fault_run() {
	name=$1
	shift
	! (export "$@" &&
	   gpt_mpi 8 --model gpt-tiny --steps $STEPS --seed 9 -q \
		--cluster c8.json --plan four.json --then 10:eight.json \
		--timeout-s 3) >$name.out 2>$name.err &&
	test "$(tail -1 $name.out)" = "$(sed -n 10p ref.out)"
}

test_expect_success 'a joiner killed during the migration stops every rank' '
	fault_run kill ARACHNE_MIGRATE_FAULT=kill:5 &&
	test "$(grep -c "migration aborted, the old state is intact" kill.err)" -ge 1
'

test_expect_success 'a sender stalled during the migration: the others time out' '
	fault_run stall ARACHNE_MIGRATE_FAULT=stall:1 &&
	grep "the migration after step 10 failed: .*3.0 s" stall.err &&
	test "$(grep -c "the old state is intact" stall.err)" -ge 1
'

test_expect_success 'the checkpoint written before a failed migration resumes it' '
	! (export ARACHNE_MIGRATE_FAULT=kill:5 &&
	   gpt_mpi 8 --model gpt-tiny --steps $STEPS --seed 9 -q \
		--cluster c8.json --plan four.json --then 10:eight.json \
		--checkpoint ck --timeout-s 3) >ck1.out 2>ck1.err &&
	test "$(tail -1 ck1.out)" = "$(sed -n 10p ref.out)" &&
	test "$(ls ck | grep -c "^rank-n0-[0-3].bin$")" -eq 4 &&
	gpt_mpi 8 --model gpt-tiny --steps $STEPS --seed 9 -q --cluster c8.json \
		--plan four.json --then 10:eight.json --resume ck \
		>resumed.out 2>resumed.err &&
	sed -n "11,20p" ref.out >ref-tail.out &&
	"$GPT_CHECK" losses resumed.out ref-tail.out
'

test_expect_success 'a checkpoint resumes only with its own plan' '
	test_must_fail gpt_mpi 8 --model gpt-tiny --steps $STEPS --seed 9 -q \
		--cluster c8.json --plan eight.json --resume ck 2>wrong.err &&
	grep -e "resume with the plan of the checkpoint" -e "No such file" wrong.err
'

test_done
