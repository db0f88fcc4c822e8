#!/bin/sh
test_description='an elastic job of arachne-gpt on a live Slurm

slurm-examples/train-elastic.sbatch with its default trainer, arachne-gpt,
on two nodes of two GPU types: the plan comes from plannerd, a shrink is
asked while it trains, arachne-gpt moves its live state in-process while
node2 is held, the script commits (node2 is released) and the next segment
trains on node1 alone.  Then job B joins with join-gpus.sbatch on node3:
the trainer stops, the next segment of both allocations meets in the plan
directory and moves the state, and both train together over TCP until B
leaves, its state moving back while it trains; B ends and A trains on to
the end.  Every step of the job must print the loss of the uninterrupted
one-process run to 1e-5 relative.  Last, C joins a job with GPUs no faster
plan uses: the job keeps its plan and C gives them back at once.'
. "$(dirname "$0")/lib.sh"

require_gpt_mpi

# slurm_setup unsets every ARACHNE_* of the environment.
GPT_BIN=$ARACHNE_GPT
SLURM_CLUSTER_NODES="node1:h100:2 node2:a6000:2 node3:h100:2 node4:slow:2"
export SLURM_CLUSTER_NODES
slurm_setup 17150
cd "$SLURM_DIR/work" || exit 1
EXAMPLES="$top_srcdir/slurm-examples"
# Enough steps that B can leave while both allocations train.
STEPS=400

# wait_grep PATTERN FILE [TENTHS]: until FILE has a line matching, bounded;
# else FILE, then what never came (the last line a failure shows).
wait_grep() {
	ar_wait_until "${3:-1200}" "/$1/ in $2" grep -q "$1" "$2" || {
		cat "$2" >&2
		echo "no line /$1/ in $2" >&2
		return 1
	}
}

# steps_beyond N [LOG]: job A's log (or LOG) has more than N step lines.
steps_beyond() {
	test "$(grep -c "^step " "${2:-A.log}")" -gt "$1"
}

# trainer_ranks JOB: the pids of JOB's arachne-gpt ranks on this host.
trainer_ranks() {
	for pid in $(pgrep -x arachne-gpt); do
		tr "\0" " " </proc/$pid/cmdline 2>/dev/null |
			grep -q -- "--plan-dir $SLURM_PLAN_DIR/$1 " && echo $pid
	done
	return 0
}

# two_ranks JOB: JOB's segment runs its two ranks.
two_ranks() {
	test "$(trainer_ranks "$1" | wc -l)" = 2
}

test_expect_success PLANNERD 'setup: plannerd, the example script with arachne-gpt' '
	# GPUs of 1 TFLOPS: gpt-tiny is then worth every GPU of the job.
	# Their profiles are named apart from the GRES types (as a site maps
	# its h100_80g to h100), so the trainer must place on the composition
	# as plannerd planned it, not on the nodes as Slurm names their GPUs.
	cp -R "$top_srcdir/profiles" profiles &&
	chmod -R u+w profiles &&
	for g in h100 a6000; do
		sed -e "s/^name = $g\$/name = tiny-$g/" \
			-e "s/^peak_tflops = [0-9.]*/peak_tflops = 1/" \
			profiles/gpus/$g.ini >profiles/gpus/tiny-$g.ini &&
		"$top_builddir/costmodel/arachne-profile" synth -q --model gpt-tiny \
			--gpu tiny-$g --profiles profiles || return 1
	done &&
	# and one that only slows a plan: as slow, with almost no bandwidth.
	sed -e "s/^name = a6000\$/name = tiny-slow/" \
		-e "s/^peak_tflops = [0-9.]*/peak_tflops = 1/" \
		-e "s/^hbm_GBps = [0-9.]*/hbm_GBps = 1/" \
		-e "s/^intra_node_GBps = [0-9.]*/intra_node_GBps = 0.1/" \
		-e "s/^network_gbps = [0-9.]*/network_gbps = 0.1/" \
		profiles/gpus/a6000.ini >profiles/gpus/tiny-slow.ini &&
	"$top_builddir/costmodel/arachne-profile" synth -q --model gpt-tiny \
		--gpu tiny-slow --profiles profiles &&
	AR_PROFILES=$PWD/profiles && export AR_PROFILES &&
	SLURM_GRES_MAP="{ gres = \"h100\"; gpu = \"tiny-h100\"; },
		{ gres = \"a6000\"; gpu = \"tiny-a6000\"; },
		{ gres = \"slow\"; gpu = \"tiny-slow\"; }" &&
	slurm_plannerd_start &&
	mkdir bin &&
	ln -s "$GPT_BIN" "$top_builddir/migrate/arachne-migrate" bin/ &&
	# Both allocations look for the join, and later for the leave, once
	# the trainer moved its state; A looks only after B committed it
	# (bounded, 300 s: the test waits 360 s for it), the order that a busy
	# node makes: A'"'"'s script must still say the change is done.
	cat >bin/arachnectl <<-EOF &&
	#!/bin/sh
	gen=\$(head -n1 $PWD/state/generation 2>/dev/null)
	if [ "\$1" = pending ] && [ "\$SLURM_JOB_ID" = "\$(cat $PWD/A.job)" ] &&
	   { [ "\$gen" = 3 ] || [ "\$gen" = 4 ]; }; then
		for i in \$(seq 1 3000); do
			grep -q "generation \$gen ([a-z]*) done" $PWD/B.log && break
			sleep 0.1
		done
	fi
	exec "$top_builddir/plannerd/arachnectl" "\$@"
	EOF
	chmod +x bin/arachnectl &&
	# The launcher: Slurm'"'"'s PMIx cannot run two slurmd of one host, so
	# Open MPI'"'"'s mpirun starts the ranks (through srun), two per node; it
	# needs the tasks per node that a resize script unsets.  Every "node"
	# is this host: its ranks must not take each other for neighbours in
	# shared memory.
	cat >bin/mpirun-job <<-EOF &&
	#!/bin/sh
	SLURM_TASKS_PER_NODE="2(x\$SLURM_NNODES)" exec "$MPIRUN" --allow-run-as-root --map-by ppr:2:node "\$@"
	EOF
	chmod +x bin/mpirun-job &&
	PATH=$PWD/bin:$PATH STATE=$PWD/state SEGMENTS=12 STEPS=$STEPS SEED=9 \
	LAUNCH=mpirun-job OMPI_MCA_btl=self,tcp &&
	export PATH STATE SEGMENTS STEPS SEED LAUNCH OMPI_MCA_btl
'

test_expect_success PLANNERD 'job A trains generation 1 on node1 and node2' '
	A=$(sbatch --parsable -o A.log -w node1,node2 -N2 --ntasks-per-node=2 \
		--gres=gpu:2 "$EXAMPLES/train-elastic.sbatch") &&
	echo $A >A.job &&
	slurm_wait_for "$SLURM_PLAN_DIR/$A/plan.1.json" &&
	wait_grep "^step 3 loss " A.log &&
	cp "$SLURM_PLAN_DIR/$A/plan.1.json" plan1.json &&
	grep "\"node\": \"node2\"" plan1.json &&
	test "$(cat state/generation 2>/dev/null || echo none)" = none
'

test_expect_success PLANNERD 'A shrinks while it trains: arachne-gpt moves the state, node2 goes' '
	A=$(cat A.job) &&
	arachnectl -s "$SLURM_PLANNERD_SOCK" --plan-dir "$SLURM_PLAN_DIR" \
		shrink $A --nodes 1 >shrink.out &&
	cat shrink.out &&
	grep "job $A: generation 2 (shrink): node2 leaves" shrink.out &&
	wait_grep "generation 2 (shrink) done" A.log &&
	cat A.log &&
	grep "arachne-gpt: generation 2 (shrink): the state moved after step [0-9]*; stopping" A.log &&
	grep "generation 2 (shrink) committed: node2 released" A.log &&
	test "$(head -n1 state/generation)" = 2 &&
	! ls state | grep node2 &&
	test "$(squeue -h -j $A -o %N)" = node1
'

test_expect_success PLANNERD 'B joins: the state moves to node3 and both allocations train' '
	A=$(cat A.job) &&
	# A step of gpt-tiny takes milliseconds, the start of a job on a
	# busy host up to minutes: once the segment after the shrink trains,
	# A'"'"'s ranks are held (SIGSTOP) until B asked to join, as a step of
	# a real model would hold them, lest A train to its end first.
	shrunk=$(grep -c "^step " A.log) &&
	ar_wait_until 1200 "job $A'"'"'s next segment" steps_beyond $shrunk &&
	ar_wait_until 300 "job $A'"'"'s two ranks" two_ranks $A &&
	ranks=$(trainer_ranks $A) &&
	kill -STOP $ranks &&
	{
		B=$(sbatch --parsable -o B.log -w node3 -N1 --ntasks-per-node=2 \
			--gres=gpu:2 --arachne=join=$A "$EXAMPLES/join-gpus.sbatch") &&
		echo $B >B.job &&
		slurm_wait_for "$SLURM_PLAN_DIR/$A/plan.3.json" 1200
		asked=$?
		kill -CONT $ranks
		test $asked = 0
	} &&
	wait_grep "generation 3 (join): the plan needs GPUs this run does not have" A.log &&
	wait_grep "generation 3 (join) done" A.log 3600 &&
	cat A.log B.log &&
	grep "generation 3 (join) of job $A: the trainer moves the model state" B.log &&
	grep "arachne-gpt: generation 3 (join): the state moved after step [0-9]*; stopping" A.log &&
	grep "generation 3 (join) done: the other allocation committed it" A.log &&
	test "$(head -n1 state/generation)" = 3 &&
	ls state | grep "^rank-node3-" &&
	cp "$SLURM_PLAN_DIR/$A/plan.3.json" plan3.json &&
	grep "\"node\": \"node3\"" plan3.json &&
	! grep "^step " B.log &&
	# the joint segment trains: steps after the commit
	joined=$(grep -c "^step " A.log) &&
	ar_wait_until 1200 "steps of the joint segment" steps_beyond $((joined + 2))
'

test_expect_success PLANNERD 'B leaves while both train: its state moves back, B ends, A trains on' '
	A=$(cat A.job) B=$(cat B.job) &&
	arachnectl -s "$SLURM_PLANNERD_SOCK" --plan-dir "$SLURM_PLAN_DIR" \
		leave $B >leave.out &&
	cat leave.out &&
	steps_beyond 0 && ! grep -q "^step $STEPS " A.log &&
	wait_grep "generation 4 (leave) done" A.log 3600 &&
	ar_wait_until 600 "job $B to end" slurm_job_gone $B &&
	cat A.log B.log &&
	grep "arachne-gpt: generation 4 (leave): the state moved after step [0-9]*; stopping" A.log &&
	grep "generation 4 (leave) of job $A: moving the model state" B.log &&
	grep "generation 4 (leave) done: the other allocation committed it" A.log &&
	test "$(slurm_job_state $B)" = COMPLETED &&
	! ls state | grep node3
'

test_expect_success PLANNERD 'A trains to the end on node1; every step has the uninterrupted loss' '
	A=$(cat A.job) &&
	ar_wait_until 3000 "job $A to end" slurm_job_gone $A &&
	test "$(slurm_job_state $A)" = COMPLETED &&
	cat A.log &&
	# It ends with the last step, not with segments that have nothing to train.
	grep "trained to step $STEPS: the job ends" A.log &&
	! grep "nothing left to train" A.log &&
	mbs=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[\"micro_batch\"])" plan1.json) &&
	"$GPT_BIN" --model gpt-tiny --steps $STEPS --seed 9 --micro-batch $mbs \
		-q >ref.out &&
	grep "^step " A.log >steps.out &&
	"$GPT_CHECK" losses steps.out ref.out
'

test_expect_success PLANNERD 'C joins with GPUs no faster plan uses: the plan stays, C gives them back' '
	D=$(STATE=$PWD/state-d STEPS=1000000 sbatch --parsable -o D.log -w node1 \
		-N1 --ntasks-per-node=2 --gres=gpu:2 "$EXAMPLES/train-elastic.sbatch") &&
	wait_grep "^step 3 loss " D.log &&
	C=$(sbatch --parsable -o C.log -w node4 -N1 --ntasks-per-node=2 \
		--gres=gpu:2 --arachne=join=$D "$EXAMPLES/join-gpus.sbatch") &&
	ar_wait_until 1200 "job $C to end" slurm_job_gone $C &&
	cat C.log &&
	grep "generation 2 of job $D uses none of these GPUs (no faster plan with them): giving them back" C.log &&
	# Whichever script looks first commits the leave, with no trainer.
	if grep "generation 3 (leave) of job $D: no model state to move" C.log; then
		grep "generation 3 (leave) done" C.log
	else
		grep "generation 3 (leave): no model state to move" D.log &&
		grep "generation 3 (leave) done" D.log
	fi &&
	! grep "the trainer moves" C.log D.log &&
	test "$(slurm_job_state $C)" = COMPLETED &&
	! grep "^step " C.log &&
	python3 -c "import json, sys
plans = [json.load(open(\"%s/plan.%d.json\" % (sys.argv[1], g)))[\"templates\"] for g in (1, 2, 3)]
assert plans[0] == plans[1] == plans[2], plans" "$SLURM_PLAN_DIR/$D" &&
	steps=$(grep -c "^step " D.log) &&
	ar_wait_until 1200 "job $D to train on" steps_beyond $((steps + 2)) D.log &&
	scancel $D &&
	ar_wait_until 600 "job $D to end" slurm_job_gone $D
'

test_done
