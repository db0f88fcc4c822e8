#!/bin/sh
test_description='arachne.so on a real Slurm with plannerd: allocations that join, end or shrink unannounced replan the job

The two-phase protocol (arachnectl shrink and leave) is t0705; here the
allocation changes under the job without it, and the plugin replans at the
next step and says whose state was lost.'
. "$(dirname "$0")/lib.sh"

slurm_setup 17120
cd "$SLURM_DIR/work" || exit 1
CHECK="python3 $top_srcdir/tests/spank-plan-check.py"
MODEL=gpt-neo-2.7b

# step NAME: one srun step whose tasks print their plan generation,
# migration and role into NAME.out.
cat >step.sh <<\EOF
step() {
	srun sh -c 'echo "$SLURMD_NODENAME gen=$ARACHNE_PLAN_GENERATION plan=$ARACHNE_PLAN mig=${ARACHNE_MIGRATION-none} role=$ARACHNE_ROLE pending=${ARACHNE_PENDING-none} lost=${ARACHNE_STATE_LOST-none}"' >"$1.out"
}
wait_file() {
	for i in $(seq 1 300); do test -e "$1" && return 0; sleep 0.1; done
	echo "timed out after 30 s waiting for $1" >&2
	return 1
}
EOF

test_expect_success PLANNERD 'start plannerd' '
	slurm_plannerd_start
'

test_expect_success PLANNERD 'a running job and a second allocation that joins it' '
	cat >base.sh <<-EOF &&
	#!/bin/sh
	. $PWD/step.sh
	step base1
	touch base1.done
	wait_file joined.ready && step base2
	# As if the migration of the join ran (t0705 runs it).
	$top_builddir/plannerd/arachnectl commit >commit.out
	touch base2.done
	wait_file joined.gone && step base3
	cp -r "\$ARACHNE_PLAN_DIR" $PWD/base.plans
	EOF
	cat >joiner.sh <<-EOF &&
	#!/bin/sh
	. $PWD/step.sh
	env | grep "^ARACHNE_" | sort >joiner.env
	step joiner
	touch joined.ready
	wait_file base2.done
	EOF
	X=$(sbatch --parsable -o base.log -w node2 --gres=gpu:h100:2 \
		--arachne=model=$MODEL,global_batch=16,seq_len=1024 base.sh) &&
	echo $X >base.job &&
	slurm_wait_for base1.done &&
	Y=$(sbatch --parsable -o joiner.log -w node1 --gres=gpu:a100:2 \
		--arachne=join=$X joiner.sh) &&
	echo $Y >joiner.job &&
	slurm_wait_for joined.ready &&
	slurm_wait_gone $Y &&
	touch joined.gone &&
	slurm_wait_gone $X &&
	cat base.log joiner.log base1.out base2.out base3.out joiner.env &&
	test "$(slurm_job_state $X)" = COMPLETED &&
	test "$(slurm_job_state $Y)" = COMPLETED
'

test_expect_success PLANNERD 'before the join the job ran on its own plan' '
	X=$(cat base.job) &&
	grep "node2 gen=1 plan=$SLURM_PLAN_DIR/$X/plan.1.json mig=none" base1.out &&
	$CHECK gpus base.plans/plan.1.json >g1.out &&
	printf "%s\n" node2:0 node2:1 >g1.expected &&
	test_cmp g1.expected g1.out
'

test_expect_success PLANNERD 'the join replanned over both allocations, with a migration' '
	X=$(cat base.job) &&
	grep "^ARACHNE_JOINED=$X$" joiner.env &&
	grep "^ARACHNE_PLAN=$SLURM_PLAN_DIR/$X/plan.2.json$" joiner.env &&
	grep "^ARACHNE_MIGRATION=$SLURM_PLAN_DIR/$X/migration.2.json$" joiner.env &&
	grep "^ARACHNE_PENDING=join$" joiner.env &&
	grep "^node1 gen=2 plan=$SLURM_PLAN_DIR/$X/plan.2.json mig=$SLURM_PLAN_DIR/$X/migration.2.json role=\(worker\|unused\) pending=join lost=none$" joiner.out &&
	$CHECK gpus base.plans/plan.2.json >g2.out &&
	printf "%s\n" node1:0 node1:1 node2:0 node2:1 >g2.expected &&
	test_cmp g2.expected g2.out &&
	python3 -m json.tool base.plans/migration.2.json >/dev/null
'

test_expect_success PLANNERD 'the running job found the new plan at its next step' '
	X=$(cat base.job) &&
	grep "node2 gen=2 plan=$SLURM_PLAN_DIR/$X/plan.2.json mig=$SLURM_PLAN_DIR/$X/migration.2.json" base2.out
'

test_expect_success PLANNERD 'the joined allocation ending unannounced: replanned at the next step, its state lost' '
	X=$(cat base.job) &&
	grep "node2 gen=3 plan=$SLURM_PLAN_DIR/$X/plan.3.json mig=$SLURM_PLAN_DIR/$X/migration.3.json .* pending=none lost=node1$" base3.out &&
	$CHECK gpus base.plans/plan.3.json >g3.out &&
	test_cmp g1.expected g3.out &&
	python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s[\"joined\"] == [], s; assert s[\"lost\"][\"nodes\"] == [\"node1\"], s" \
		base.plans/state.json &&
	grep "arachne: warning: job $X: the model state held on node1 left with those nodes before it was migrated" base.log
'

test_expect_success PLANNERD 'the job ended: its plan directory is gone' '
	X=$(cat base.job) &&
	! test -e "$SLURM_PLAN_DIR/$X"
'

test_expect_success PLANNERD 'a shrink by scontrol update NumNodes replans at the next step' '
	cat >shrink.sh <<-EOF &&
	#!/bin/sh
	. $PWD/step.sh
	step shrink1
	scontrol update JobId=\$SLURM_JOB_ID NumNodes=1
	. ./slurm_job_\${SLURM_JOB_ID}_resize.sh
	step shrink2
	cp -r "\$ARACHNE_PLAN_DIR" $PWD/shrink.plans
	EOF
	J=$(sbatch --parsable --wait -o shrink.log -N2 -w node1,node2 \
		--gres=gpu:2 --arachne=model=$MODEL,global_batch=16,seq_len=1024 \
		shrink.sh) &&
	cat shrink.log shrink1.out shrink2.out &&
	test "$(slurm_job_state $J)" = COMPLETED &&
	test "$(grep -c "gen=1 .*mig=none" shrink1.out)" = 2 &&
	test "$(wc -l <shrink2.out)" = 1 &&
	grep "node1 gen=2 plan=$SLURM_PLAN_DIR/$J/plan.2.json mig=$SLURM_PLAN_DIR/$J/migration.2.json .* lost=node2$" shrink2.out &&
	$CHECK gpus shrink.plans/plan.1.json >s1.out &&
	printf "%s\n" node1:0 node1:1 node2:0 node2:1 >s1.expected &&
	test_cmp s1.expected s1.out &&
	$CHECK gpus shrink.plans/plan.2.json >s2.out &&
	printf "%s\n" node1:0 node1:1 >s2.expected &&
	test_cmp s2.expected s2.out
'

test_expect_success PLANNERD 'an allocation that did not change is not replanned' '
	cat >steady.sh <<-EOF &&
	#!/bin/sh
	. $PWD/step.sh
	step steady1
	step steady2
	EOF
	J=$(sbatch --parsable --wait -o steady.log -w node2 --gres=gpu:2 \
		--arachne=model=$MODEL,global_batch=16,seq_len=1024 steady.sh) &&
	grep "gen=1 .*mig=none" steady2.out &&
	! grep "gen=2" steady1.out steady2.out
'

test_done
