#!/bin/sh
test_description='an elastic job end to end on a live Slurm with one plannerd per node

The slurm-examples scripts themselves, on five nodes of two GPU types: job A
on h100 and a100 nodes; B joins and the migration runs with ranks in both
allocations; A shrinks with arachnectl shrink, the state moving before the
node goes, and a full-width srun works after; B leaves, its state moving
back first; C is preempted (Slurm'"'"'s warning signal) and leaves inside its
grace; E is preempted while A cannot take part, and the change is aborted
with the old state intact.  After every migration each byte of the state
is checked.  Then the lifecycle: plan directories gone when jobs end,
plannerd forgetting, identical jobs sharing one plan, a slurmctld restart
that reuses job ids for another user, and the messages.'
. "$(dirname "$0")/lib.sh"

SLURM_CLUSTER_NODES="node1:h100:2 node2:a100:2 node3:h100:2 node4:a100:2 node5:a6000:1"
export SLURM_CLUSTER_NODES
slurm_setup 17140 per-node
cd "$SLURM_DIR/work" || exit 1
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
EXAMPLES="$top_srcdir/slurm-examples"

# wait_grep PATTERN FILE [TENTHS]: until FILE has a line matching, bounded.
wait_grep() {
	for i in $(seq 1 "${3:-600}"); do
		grep -q "$1" "$2" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "timed out waiting for /$1/ in $2" >&2
	cat "$2" >&2
	return 1
}

# verified G: every byte of every shard is where plan G puts it.
verified() {
	cp "$SLURM_PLAN_DIR/$(cat A.job)/migration.$1.json" m$1.json &&
	"$FIXTURE" verify m$1.json state >verify.$1 &&
	! grep -v " ok$" verify.$1 &&
	test "$(grep -c " ok$" verify.$1)" -gt 0
}

state() {
	python3 -c "import json,sys
s = json.load(open(sys.argv[1] + \"/state.json\"))
v = s
for k in sys.argv[2].split(\".\"):
	v = v.get(k) if isinstance(v, dict) else None
print(json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)" \
		"$SLURM_PLAN_DIR/$(cat A.job)" "$1"
}

now() {
	date +%s.%N
}

# segments_of_A: how many segments job A's tasks have started.
segments_of_A() {
	grep -c "^[0-9.]* $(cat A.job) " seg.log
}

segments_of_A_reach() {
	test "$(segments_of_A)" -ge "$1"
}

# restart_plannerd NODE: stop that node's plannerd, start it again, wait
# (bounded) for its socket.
restart_plannerd() {
	kill "$(cat "$SLURM_DIR/pd/$1/pid")" || return 1
	ar_wait_until 50 "the plannerd of $1 to remove its socket" \
		test ! -S "$SLURM_DIR/pd-$1.sock" || return 1
	"$top_builddir/plannerd/plannerd" -F -f "$SLURM_DIR/pd/$1/plannerd.conf" \
		>>"$SLURM_DIR/pd/$1/log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- &
	echo $! >"$SLURM_DIR/pd/$1/pid"
	slurm_wait_for "$SLURM_DIR/pd-$1.sock" 100
}

test_expect_success PLANNERD 'setup: toy profiles, one plannerd per node, the example scripts' '
	plannerd_profiles "$SLURM_DIR/profiles" 4096 &&
	slurm_plannerd_start_all "$SLURM_DIR/profiles" &&
	mkdir bin state &&
	ln -s "$top_builddir/plannerd/arachnectl" "$top_builddir/migrate/arachne-migrate" bin/ &&
	cat >segment.sh <<-EOF &&
	#!/bin/sh
	# A training segment: says where it runs and on what plan.
	echo "\$(date +%s.%N) \$SLURM_JOB_ID \$SLURMD_NODENAME gpu=\$ARACHNE_LOCAL_GPU gen=\$ARACHNE_PLAN_GENERATION role=\$ARACHNE_ROLE pending=\${ARACHNE_PENDING-} lost=\${ARACHNE_STATE_LOST-}" >>$PWD/seg.log
	sleep \$(cat $PWD/seglen.\$SLURM_JOB_ID 2>/dev/null || echo 1)
	EOF
	chmod +x segment.sh &&
	PATH=$PWD/bin:$PATH STATE=$PWD/state TRAIN=$PWD/segment.sh SEGMENTS=400 &&
	export PATH STATE TRAIN SEGMENTS
'

test_expect_success PLANNERD 'job A on two GPU types gets a plan; its state is laid out' '
	A=$(sbatch --parsable -o A.log -w node1,node2 -N2 --ntasks-per-node=2 \
		--gres=gpu:2 --arachne=model=toy,global_batch=16,signal=USR2 \
		"$EXAMPLES/train-elastic.sbatch") &&
	echo $A >A.job &&
	slurm_wait_for "$SLURM_PLAN_DIR/$A/plan.1.json" &&
	test "$(state composition)" = "{\"name\": \"slurm-job-$A\", \"nodes\": [{\"gpu\": \"h100\", \"gpus_per_node\": 2, \"hosts\": \"node1\"}, {\"gpu\": \"a100\", \"gpus_per_node\": 2, \"hosts\": \"node2\"}]}" &&
	python3 -c "import json, sys
s = json.load(open(sys.argv[1] + \"/state.json\"))
m = {\"h100\": \"fast\", \"a100\": \"slow\", \"a6000\": \"slow\"}
for n in s[\"composition\"][\"nodes\"]:
	n[\"gpu\"] = m[n[\"gpu\"]]
json.dump(s[\"composition\"], open(\"c1.json\", \"w\"))" "$SLURM_PLAN_DIR/$A" &&
	arachne-migrate --from "$SLURM_PLAN_DIR/$A/plan.1.json" \
		--to "$SLURM_PLAN_DIR/$A/plan.1.json" --cluster c1.json --model toy \
		--profiles "$SLURM_DIR/profiles" --output init.json &&
	"$FIXTURE" init init.json state &&
	ls state >state.1 &&
	test "$(wc -l <state.1)" = 4
'

test_expect_success PLANNERD 'scontrol show job shows the plan line' '
	scontrol show job $(cat A.job) >A.show &&
	grep "Comment=arachne generation 1: model=toy templates=[0-9]* pipelines=[0-9]* gpus=4 " A.show
'

test_expect_success PLANNERD 'B joins: the migration runs with ranks in both allocations' '
	A=$(cat A.job) &&
	t0=$(now) &&
	B=$(sbatch --parsable -o B.log -w node3 -N1 --ntasks-per-node=2 \
		--gres=gpu:2 --arachne=join=$A "$EXAMPLES/join-gpus.sbatch") &&
	echo $B >B.job &&
	wait_grep "generation 2 (join) done" A.log &&
	echo "join $t0 $(now)" >>times &&
	cat A.log B.log &&
	grep "arachne-migrate: 6 ranks met" A.log &&
	grep "generation 2 (join) of job $A: moving the model state" B.log &&
	verified 2 &&
	test "$(state pending)" = None &&
	test "$(state joined)" = "[$B]" &&
	scontrol show job $A >A2.show &&
	grep "Comment=arachne generation 2: model=toy templates=[0-9]* pipelines=[0-9]* gpus=[0-9]* " A2.show
'

test_expect_success PLANNERD 'after the join both allocations train on generation 2' '
	A=$(cat A.job) B=$(cat B.job) &&
	wait_grep "^[0-9.]* $A node1 gpu=0 gen=2 role=worker pending= lost=$" seg.log &&
	wait_grep "^[0-9.]* $B node3 gpu=1 gen=2 role=worker pending= lost=$" seg.log
'

test_expect_success PLANNERD 'the replan was answered by node-local daemons that did not make the first plan' '
	grep -l "job $(cat A.job): replan answered" "$SLURM_DIR"/pd/node3/log
'

test_expect_success PLANNERD 'arachnectl list shows the job, its generation and plan' '
	arachnectl list --plan-dir "$SLURM_PLAN_DIR" >list.out &&
	cat list.out &&
	grep "^$(cat A.job) *root *2 *- *model=toy templates=" list.out
'

test_expect_success PLANNERD 'A shrinks: the state moves while node2 is held, then node2 goes' '
	A=$(cat A.job) &&
	t0=$(now) &&
	arachnectl -s "$SLURM_DIR/pd-node5.sock" --plan-dir "$SLURM_PLAN_DIR" \
		shrink $A --nodes 1 >shrink.out &&
	cat shrink.out &&
	grep "job $A: generation 3 (shrink): node2 leaves" shrink.out &&
	wait_grep "generation 3 (shrink) done" A.log &&
	echo "shrink $t0 $(now)" >>times &&
	grep "generation 3 (shrink) committed: node2 released" A.log &&
	verified 3 &&
	! ls state | grep node2 &&
	test "$(squeue -h -j $A -o %N)" = node1
'

test_expect_success PLANNERD 'after the shrink a full-width srun runs on the smaller allocation' '
	A=$(cat A.job) &&
	wait_grep "^[0-9.]* $A node1 gpu=1 gen=3 role=worker" seg.log &&
	sleep 2 &&
	! grep "conflicts with allocated node count" A.log &&
	! grep "^[0-9.]* $A node2 .* gen=3 role=[a-z]* pending= " seg.log
'

test_expect_success PLANNERD 'B leaves: its state moves back before it ends' '
	A=$(cat A.job) B=$(cat B.job) &&
	t0=$(now) &&
	arachnectl -s "$SLURM_DIR/pd-node5.sock" --plan-dir "$SLURM_PLAN_DIR" \
		leave $B >leave.out &&
	cat leave.out &&
	wait_grep "generation 4 (leave) done" A.log &&
	echo "leave $t0 $(now)" >>times &&
	verified 4 &&
	slurm_wait_gone $B &&
	test "$(slurm_job_state $B)" = COMPLETED &&
	! ls state | grep node3 &&
	test "$(state joined)" = "[]"
'

test_expect_success PLANNERD 'C joins, then Slurm warns it of a preemption: it leaves inside its grace' '
	A=$(cat A.job) &&
	C=$(sbatch --parsable -o C.log -w node4 -N1 --ntasks-per-node=2 \
		--gres=gpu:2 --arachne=join=$A "$EXAMPLES/join-gpus.sbatch") &&
	echo $C >C.job &&
	wait_grep "generation 5 (join) done" A.log &&
	verified 5 &&
	t0=$(now) &&
	scancel --batch --signal=USR1 $C &&
	wait_grep "generation 6 (leave) done" A.log &&
	echo "preempt $t0 $(now)" >>times &&
	verified 6 &&
	slurm_wait_gone $C &&
	test "$(slurm_job_state $C)" = COMPLETED
'

test_expect_success PLANNERD 'E is preempted while A cannot take part: aborted, old state intact, the loss said' '
	A=$(cat A.job) &&
	E=$(export GRACE=4; sbatch --parsable -o E.log -w node4 -N1 --ntasks-per-node=2 \
		--gres=gpu:2 --arachne=join=$A "$EXAMPLES/join-gpus.sbatch") &&
	wait_grep "generation 7 (join) done" A.log &&
	verified 7 &&
	(cd state && md5sum rank-* >../before-abort.md5) &&
	# Both of A'"'"'s tasks must be inside a 20 s segment when E is warned:
	# a segment logs its line before it reads seglen, so two lines of A
	# logged after seglen is written are two tasks that cannot take part.
	# (A fixed 1.5 s sleep here can lose that race on a loaded machine.)
	segments=$(segments_of_A) &&
	echo 20 >seglen.$A &&
	ar_wait_until 300 "both tasks of A to start a 20 s segment" \
		segments_of_A_reach $((segments + 2)) &&
	scancel --batch --signal=USR1 $E &&
	slurm_wait_gone $E &&
	cat E.log &&
	grep "generation 8 (leave) abandoned: the migration failed; generation 9 is plan 7 again" E.log &&
	# plan 7 again, on the composition plan 7 was made for
	cmp "$SLURM_PLAN_DIR/$A/plan.7.json" "$SLURM_PLAN_DIR/$A/plan.9.json" &&
	cmp "$SLURM_PLAN_DIR/$A/cluster.7.json" "$SLURM_PLAN_DIR/$A/cluster.9.json" &&
	! cmp "$SLURM_PLAN_DIR/$A/cluster.8.json" "$SLURM_PLAN_DIR/$A/cluster.9.json" &&
	(cd state && md5sum -c ../before-abort.md5) &&
	test -z "$(ls -A state | grep -v "^rank-")" &&
	rm seglen.$A &&
	wait_grep "^[0-9.]* $A node1 .* lost=node4$" seg.log 400 &&
	test "$(state lost.nodes)" = "[\"node4\"]" &&
	grep "arachne: warning: job $A: the model state held on node4 left with those nodes before it was migrated" A.log
'

test_expect_success PLANNERD 'the reconfiguration times, signal to the next step' '
	A=$(cat A.job) &&
	while read what t0 t1; do
		next=$(awk -v t=$t1 -v j=$A "\$2 == j && \$1 > t { print \$1; exit }" seg.log) &&
		test -n "$next" &&
		echo "$what: $(echo "$t1 - $t0" | bc) s to the commit, $(echo "$next - $t0" | bc) s to the next step" ||
		return 1
	done <times >times.out &&
	cat times.out &&
	test "$(wc -l <times.out)" = 4
'

test_expect_success PLANNERD 'A ends: its plan directory goes and every plannerd forgets it' '
	A=$(cat A.job) &&
	scancel $A &&
	slurm_wait_gone $A &&
	ar_wait_until 100 "the epilog to remove $SLURM_PLAN_DIR/$A" \
		test ! -e "$SLURM_PLAN_DIR/$A" &&
	for n in node1 node2; do
		test_expect_code 1 arachnectl -s "$SLURM_DIR/pd-$n.sock" show $A 2>forget.$n &&
		grep "not_found" forget.$n || return 1
	done
'

test_expect_success PLANNERD 'three identical jobs: plannerd plans once' '
	for i in 1 2 3; do
		srun -w node5 --gres=gpu:1 --arachne=model=toy,global_batch=8 \
			printenv ARACHNE_PLAN_SUMMARY >same.$i || return 1
	done &&
	test "$(cat same.1)" = "$(cat same.3)" &&
	arachnectl -s "$SLURM_DIR/pd-node5.sock" --json status >status.json &&
	python3 -c "import json
s = json.load(open(\"status.json\"))
assert s[\"plans_made\"] == 1 and s[\"cache_hits\"] >= 2, s"
'

test_expect_success PLANNERD 'a job without GPUs: the warning names the job' '
	J=$(sbatch --parsable --wait -w node5 -o nogpu.out -e nogpu.err \
		--arachne=model=toy --wrap "srun true") &&
	cat nogpu.err &&
	grep "arachne: warning: job $J: no GPUs allocated (ask for them with --gres=gpu:TYPE:N); running without a plan (mode=advise)" nogpu.err &&
	! grep "job 0" nogpu.err
'

test_expect_success PLANNERD 'sbatch refuses to join a job that has ended' '
	A=$(cat A.job) &&
	test_must_fail sbatch -w node3 --gres=gpu:2 --arachne=join=$A \
		--wrap true 2>join-ended.err &&
	cat join-ended.err &&
	grep "join=$A: job $A has ended; there is nothing to join" join-ended.err
'

test_expect_success PLANNERD 'plannerd forgets at start the jobs slurmctld no longer knows' '
	echo "{\"nodes\":[{\"gpu\":\"slow\",\"gpus_per_node\":1,\"hosts\":\"node5\"}]}" >n5.json &&
	arachnectl -s "$SLURM_DIR/pd-node5.sock" plan 99999 --model toy --cluster n5.json >/dev/null &&
	restart_plannerd node5 &&
	wait_grep "job 99999: forgotten: slurmctld reports it over" "$SLURM_DIR/pd/node5/log" 100 &&
	test_expect_code 1 arachnectl -s "$SLURM_DIR/pd-node5.sock" show 99999
'

test_expect_success PLANNERD 'slurmctld restarted: a reused job id works for another user' '
	# What an earlier job 1 left: a root-owned plan directory, and a
	# plan stored for root in node5'"'"'s plannerd.
	"$top_srcdir/tests/slurm-cluster.sh" stop "$SLURM_DIR" &&
	"$top_srcdir/tests/slurm-cluster.sh" start "$SLURM_DIR" "$SLURM_PORT" \
		"$SLURM_PLUGSTACK" 2>restart.log &&
	mkdir -p "$SLURM_PLAN_DIR/1" &&
	echo "{\"arachne_state\":2,\"job_id\":1,\"uid\":0,\"submit_time\":1,\"generation\":0}" \
		>"$SLURM_PLAN_DIR/1/state.json" &&
	arachnectl -s "$SLURM_DIR/pd-node5.sock" plan 1 --model toy --cluster n5.json >/dev/null &&
	cat >reuse.sh <<-EOF &&
	#!/bin/sh
	echo "plan=\$ARACHNE_PLAN"
	srun printenv ARACHNE_ROLE
	EOF
	chmod 755 reuse.sh &&
	J=$(sbatch --parsable --wait --uid=nobody -w node5 --gres=gpu:1 \
		-o reuse.out -e reuse.err --arachne=model=toy,mode=enforce \
		reuse.sh) &&
	cat reuse.out reuse.err &&
	test "$J" = 1 &&
	test "$(slurm_job_state 1)" = COMPLETED &&
	grep "^plan=$SLURM_PLAN_DIR/1/plan.1.json$" reuse.out &&
	grep "^worker$" reuse.out &&
	grep "job 1: the stored plan of uid 0 was an earlier job with this id" "$SLURM_DIR/pd/node5/log" &&
	! test -e "$SLURM_PLAN_DIR/1"
'

test_done
