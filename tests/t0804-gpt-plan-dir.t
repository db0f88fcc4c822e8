#!/bin/sh
test_description='arachne-gpt follows an elastic job'\''s plan directory

With --plan-dir, arachne-gpt trains the generation the job'\''s state is in
(state.json, plan.G.json, and cluster.G.json: the composition as plannerd
planned it, its GRES types mapped), resumes from its --checkpoint, and at a
change pending from that generation (found before its first step or after
any step) moves its live state in-process, writes the checkpoint of the new
generation and stops for the scripts to commit.  A shrink from 4 ranks to 2
between segments, then a change of plan on 2 ranks while one trains, must
print the losses of the uninterrupted one-process run to 1e-5 relative.  A
join found while a run trains stops it with the old state; the next run,
of two launches (the old allocation'\''s ranks and the joining one'\''s,
--node n0 and n1), meets in the plan directory, moves the state at its
start, and the launches then train together over TCP until a leave found
while they train moves the state back; the old launch trains on alone.
Every step again has the one-process loss.'
. "$(dirname "$0")/lib.sh"

require_gpt_mpi

STEPS=20

# state GEN COMPOSITION [PENDING]: the job's state.json.
state() {
	printf '{"generation": %s, "composition": %s, "pending": %s}\n' \
		"$1" "$(cat "$2")" "${3:-null}" >jd/state.json
}

# seg NP: one segment of the job, as its batch script runs it.
seg() {
	gpt_mpi "$1" --model gpt-tiny --steps $STEPS --seed 9 -q \
		--plan-dir jd --checkpoint ck
}

test_expect_success 'setup: the plans and the one-process reference' '
	gpt_clusters &&
	echo "{ \"name\": \"gpt2\", \"nodes\": [ { \"gpu\": \"a100-40\", \"gpus_per_node\": 2, \"hosts\": \"n0\" } ] }" >c2.json &&
	mkdir jd &&
	"$GPT_PLAN" --cluster c4.json --mbs 2 "4:n0:0,1:0-9+n0:2,3:0-9" >jd/plan.1.json &&
	"$GPT_PLAN" --cluster c2.json --mbs 2 "8:n0:0,1:0-9" >jd/plan.2.json &&
	"$GPT_PLAN" --cluster c2.json --mbs 2 "8:n0:0:0-4/n0:1:5-9" >jd/plan.3.json &&
	echo "{ \"name\": \"gpt22\", \"nodes\": [ { \"gpu\": \"a100-40\", \"gpus_per_node\": 2, \"hosts\": \"n0,n1\" } ] }" >c22.json &&
	"$GPT_PLAN" --cluster c22.json --mbs 2 "4:n0:0,1:0-9+n1:0,1:0-9" >jd/plan.4.json &&
	"$GPT_PLAN" --cluster c2.json --mbs 2 "8:n0:0,1:0-9" >jd/plan.5.json &&
	"$ARACHNE_GPT" --model gpt-tiny --steps $STEPS --seed 9 --micro-batch 2 \
		-q >ref.out &&
	"$ARACHNE_GPT" --model gpt-tiny --steps 40 --seed 9 --micro-batch 2 \
		-q >ref40.out &&
	head -n $STEPS ref40.out | cmp - ref.out
'

test_expect_success '--plan-dir needs a checkpoint and no plan of its own' '
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 9 \
		--plan-dir jd 2>nock.err &&
	grep "plan-dir needs --checkpoint DIR" nock.err &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 9 \
		--plan-dir jd --checkpoint ck --plan jd/plan.1.json 2>both.err &&
	grep "no --plan, --cluster, --then or --resume" both.err
'

test_expect_success 'segment 1: generation 1 on 4 ranks, steps 1 to 8' '
	state 1 c4.json &&
	gpt_mpi 4 --model gpt-tiny --steps 8 --seed 9 -q --plan-dir jd \
		--checkpoint ck >seg1.out 2>seg1.err &&
	test "$(head -n1 ck/generation)" = 1 &&
	test "$(sed -n 2p ck/generation)" = "step 8" &&
	test "$(wc -l <ck/generation)" = 2 &&
	test "$(ls ck | grep -c "^rank-n0-[0-3].bin$")" = 4
'

test_expect_success 'segment 2: resumed with a shrink pending: the state moves at once and the run stops' '
	state 2 c2.json "{\"op\": \"shrink\", \"generation\": 2, \"from\": 1, \"phase\": \"migrate\", \"previous\": {\"composition\": $(cat c4.json)}}" &&
	seg 4 >seg2.out 2>seg2.err &&
	cat seg2.err &&
	test "$(cat seg2.out)" = "" &&
	grep "generation 2 (shrink): the state moved after step 8; stopping" seg2.err &&
	test "$(head -n1 ck/generation)" = 2 &&
	test "$(sed -n 3p ck/generation)" = "op shrink" &&
	test "$(ls ck | grep "^rank-")" = "$(printf "rank-n0-0.bin\nrank-n0-1.bin")" &&
	cp -r ck ck-moved
'

test_expect_success 'segment 3: committed, 2 ranks train generation 2; a change while it trains' '
	state 2 c2.json &&
	{ seg 2 >seg3.out 2>seg3.err & } &&
	ar_wait_until 600 "step 11 of segment 3" grep -q "^step 11 " seg3.out &&
	state 3 c2.json "{\"op\": \"shrink\", \"generation\": 3, \"from\": 2, \"phase\": \"migrate\", \"previous\": {\"composition\": $(cat c2.json)}}" &&
	ar_wait_until 600 "segment 3 to stop" grep -q "generation 3 (shrink): the state moved after step" seg3.err &&
	wait &&
	last=$(tail -n 1 seg3.out | cut -d" " -f2) &&
	test "$last" -ge 11 && test "$last" -lt $STEPS &&
	grep "generation 3 (shrink): the state moved after step $last; stopping" seg3.err &&
	test "$(head -n1 ck/generation)" = 3
'

test_expect_success 'segment 4: generation 3 to the end; every step has the uninterrupted loss' '
	state 3 c2.json &&
	seg 2 >seg4.out 2>seg4.err &&
	cat seg1.out seg2.out seg3.out seg4.out >all.out &&
	"$GPT_CHECK" losses all.out ref.out &&
	test "$(head -n1 ck/generation)" = 3
'

test_expect_success 'the uncommitted state resumes on the pending generation' '
	state 2 c2.json "{\"op\": \"shrink\", \"generation\": 2, \"from\": 1, \"phase\": \"migrate\", \"previous\": {\"composition\": $(cat c4.json)}}" &&
	gpt_mpi 2 --model gpt-tiny --steps 11 --seed 9 -q --plan-dir jd \
		--checkpoint ck-moved >pend.out 2>pend.err &&
	test "$(cat pend.out)" = "$(sed -n 9,11p ref.out)"
'

# joint NAME [ARGS]: one segment of the job over two launches of two ranks,
# n0's and n1's, as two allocations run it; both must succeed.
joint() {
	{ gpt_mpi 2 --model gpt-tiny --steps 40 --seed 9 -q --plan-dir jd \
		--checkpoint ck --node n0 --timeout-s 120 >$1.out 2>$1-n0.err &
	  pid=$!; } &&
	gpt_mpi 2 --model gpt-tiny --steps 40 --seed 9 -q --plan-dir jd \
		--checkpoint ck --node n1 --timeout-s 120 >$1-n1.out 2>$1-n1.err &&
	wait $pid &&
	test ! -s $1-n1.out
}

test_expect_success 'a join found while the run trains: it stops with the old state' '
	state 3 c2.json &&
	{ gpt_mpi 2 --model gpt-tiny --steps 40 --seed 9 -q --plan-dir jd \
		--checkpoint ck >j1.out 2>j1.err & pid=$!; } &&
	ar_wait_until 600 "step 22 of the run" grep -q "^step 22 " j1.out &&
	state 4 c22.json "{\"op\": \"join\", \"generation\": 4, \"from\": 3, \"phase\": \"migrate\", \"previous\": {\"composition\": $(cat c2.json)}}" &&
	test_expect_code 3 wait $pid &&
	cat j1.err &&
	last=$(tail -n 1 j1.out | cut -d" " -f2) &&
	grep "generation 4 (join): the plan needs GPUs this run does not have .*stopping after step $last with the state of generation 3 in ck; the next run, with the ranks of the other allocation, moves it" j1.err &&
	test "$(head -n1 ck/generation)" = 3 &&
	test "$(sed -n 2p ck/generation)" = "step $last"
'

test_expect_success 'the next run of both launches moves the state at its start' '
	joint j2 &&
	cat j2-n0.err &&
	test ! -s j2.out &&
	grep "generation 4 (join): the state moved after step $(tail -n 1 j1.out | cut -d" " -f2); stopping" j2-n0.err &&
	test "$(head -n1 ck/generation)" = 4 &&
	test "$(ls ck | grep "^rank-")" = "$(printf "rank-n0-0.bin\nrank-n0-1.bin\nrank-n1-0.bin\nrank-n1-1.bin")"
'

test_expect_success 'committed: both launches train together until a leave moves the state back' '
	state 4 c22.json &&
	{ joint j3 & jpid=$!; } &&
	ar_wait_until 900 "step 32 of the joint run" grep -q "^step 32 " j3.out &&
	state 5 c2.json "{\"op\": \"leave\", \"generation\": 5, \"from\": 4, \"phase\": \"migrate\", \"previous\": {\"composition\": $(cat c22.json)}}" &&
	wait $jpid &&
	cat j3-n0.err &&
	last=$(tail -n 1 j3.out | cut -d" " -f2) &&
	test "$last" -ge 32 && test "$last" -lt 40 &&
	grep "generation 5 (leave): the state moved after step $last; stopping" j3-n0.err &&
	test "$(head -n1 ck/generation)" = 5 &&
	test "$(sed -n 2,3p ck/generation)" = "$(printf "step $last\nop leave")" &&
	test "$(ls ck | grep "^rank-")" = "$(printf "rank-n0-0.bin\nrank-n0-1.bin")"
'

test_expect_success 'the old launch trains on alone; every step has the one-process loss' '
	state 5 c2.json &&
	gpt_mpi 2 --model gpt-tiny --steps 40 --seed 9 -q --plan-dir jd \
		--checkpoint ck >j4.out 2>j4.err &&
	cat seg1.out seg2.out seg3.out seg4.out j1.out j3.out j4.out >all40.out &&
	"$GPT_CHECK" losses all40.out ref40.out
'

test_expect_success 'the trainer places on the composition as planned, not on the GRES types' '
	mkdir jg &&
	cp jd/plan.2.json jg/plan.1.json &&
	sed "s/a100-40/a100_40g/" c2.json >gres2.json &&
	printf "{\"generation\": 1, \"composition\": %s, \"pending\": null}\n" \
		"$(cat gres2.json)" >jg/state.json &&
	test_must_fail gpt_mpi 2 --model gpt-tiny --steps 3 --seed 9 -q \
		--plan-dir jg --checkpoint ckg 2>gres.err &&
	grep "unknown GPU \"a100_40g\"" gres.err &&
	cp c2.json jg/cluster.1.json &&
	gpt_mpi 2 --model gpt-tiny --steps 3 --seed 9 -q --plan-dir jg \
		--checkpoint ckg >mapped.out &&
	head -n 3 ref.out >ref3.out &&
	"$GPT_CHECK" losses mapped.out ref3.out
'

test_expect_success 'a launch with the training done ends without waiting for the others' '
	state 6 c22.json &&
	cp jd/plan.4.json jd/plan.6.json &&
	printf "6\nstep 40\n" >ck/generation &&
	gpt_mpi 2 --model gpt-tiny --steps 40 --seed 9 -q --plan-dir jd \
		--checkpoint ck --node n0 >done.out 2>done.err &&
	grep "the checkpoint is of step 40: nothing left to train" done.err
'

test_done
