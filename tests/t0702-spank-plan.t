#!/bin/sh
test_description='arachne.so on a real Slurm with plannerd: a plan for the allocation, roles for the tasks, HetJobs'
. "$(dirname "$0")/lib.sh"

slurm_setup 17110
cd "$SLURM_DIR/work" || exit 1
CHECK="python3 $top_srcdir/tests/spank-plan-check.py"
MODEL=gpt-neo-2.7b

# Every task prints "NODE LOCALID ARACHNE_...=..." on one line.
cat >roles.sh <<\EOF
#!/bin/sh
echo "$SLURMD_NODENAME $SLURM_LOCALID $(env | grep "^ARACHNE_" | sort | tr "\n" " ")"
EOF
chmod +x roles.sh

test_expect_success PLANNERD 'start plannerd' '
	slurm_plannerd_start
'

test_expect_success PLANNERD 'a two-node job gets a plan at start' '
	cat >plain.sh <<-EOF &&
	#!/bin/sh
	env | grep "^ARACHNE_" | sort >batch.env
	srun $PWD/roles.sh >tasks.out
	ARACHNE_LAUNCH_DRY_RUN=1 srun -l python3 $top_srcdir/slurm-examples/arachne-launch \
		train.py --lr 1e-4 >launch.out
	cp -r "\$ARACHNE_PLAN_DIR" $PWD/plain.plans
	EOF
	J=$(sbatch --parsable --wait -w node1,node2 -N2 --ntasks-per-node=2 \
		--gres=gpu:2 -o plain.out \
		--arachne=model=$MODEL,global_batch=16,seq_len=1024 plain.sh) &&
	cat plain.out batch.env &&
	test "$(slurm_job_state $J)" = COMPLETED &&
	grep "^ARACHNE_PLAN=$SLURM_PLAN_DIR/$J/plan.1.json$" batch.env &&
	grep "^ARACHNE_PLAN_GENERATION=1$" batch.env &&
	grep "^ARACHNE_PLAN_SUMMARY=model=$MODEL " batch.env &&
	echo $J >plain.job
'

test_expect_success PLANNERD 'the plan directory is gone when the job has ended' '
	J=$(cat plain.job) &&
	test -f plain.plans/plan.1.json &&
	! test -e "$SLURM_PLAN_DIR/$J"
'

test_expect_success PLANNERD 'scontrol show job shows the plan in the comment' '
	J=$(cat plain.job) &&
	scontrol show job $J >plain.show &&
	grep "Comment=arachne generation 1: model=$MODEL templates=[0-9]* pipelines=[0-9]* gpus=4 " plain.show
'

test_expect_success PLANNERD 'the plan covers exactly the GPUs of the allocation' '
	J=$(cat plain.job) &&
	$CHECK gpus plain.plans/plan.1.json >gpus.out &&
	printf "%s\n" node1:0 node1:1 node2:0 node2:1 >gpus.expected &&
	test_cmp gpus.expected gpus.out
'

test_expect_success PLANNERD 'plannerd was asked with the GRES type of each node' '
	J=$(cat plain.job) &&
	python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(\" \".join(\"%s:%s:%d\" % (n[\"hosts\"], n[\"gpu\"], n[\"gpus_per_node\"]) for n in s[\"composition\"][\"nodes\"]))" \
		plain.plans/state.json >comp.out &&
	echo "node1:a100:2 node2:h100:2" >comp.expected &&
	test_cmp comp.expected comp.out
'

test_expect_success PLANNERD 'every task has the role the plan gives its GPU' '
	J=$(cat plain.job) &&
	cat tasks.out &&
	test "$(wc -l <tasks.out)" = 4 &&
	$CHECK roles plain.plans/plan.1.json tasks.out
'

test_expect_success PLANNERD 'the members of a pipeline share one rendezvous address' '
	sed -n "s/.*ARACHNE_PIPELINE=\([0-9]*\) .*ARACHNE_RDZV_ADDR=\([^ ]*\).*/\1 \2/p" \
		tasks.out | sort -u >rdzv.out &&
	cat rdzv.out &&
	test "$(cut -d" " -f1 rdzv.out | uniq -d)" = "" &&
	test "$(wc -l <rdzv.out)" = "$(grep ARACHNE_DP_SIZE= tasks.out | sed "s/.*ARACHNE_DP_SIZE=\([0-9]*\).*/\1/" | sort -u)"
'

test_expect_success PLANNERD 'arachne-launch gives the job one Megatron-LM world of ranks 0..N-1 and its arguments' '
	cat launch.out &&
	test "$(grep -c " train.py --lr 1e-4 --tensor-model-parallel-size [0-9]* --pipeline-model-parallel-size [0-9]* --micro-batch-size [0-9]* --global-batch-size 16 --seq-length 1024 " launch.out)" = 4 &&
	test "$(grep -c -e " --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather$" launch.out)" = 4 &&
	sed -n "s/^\([0-9]*\): MASTER_ADDR=\([^ ]*\) MASTER_PORT=\([0-9]*\) RANK=\([0-9]*\) WORLD_SIZE=\([0-9]*\) .*/\3 \4 \5/p" \
		launch.out | sort -n >ranks.out &&
	cat ranks.out &&
	test "$(wc -l <ranks.out)" = 4 &&
	test "$(cut -d" " -f1 ranks.out | sort -u | wc -l)" = 1 &&
	awk "{ n[\$1]++; if (\$2 >= \$3) bad = 1; seen[\$1 \" \" \$2]++ }
	     END { for (k in seen) if (seen[k] > 1) bad = 1; exit bad }" ranks.out
'

test_expect_success PLANNERD 'a HetJob across GPU types gets one plan over all components' '
	cat >het.sh <<-EOF &&
	#!/bin/sh
	env | grep "^ARACHNE_" | sort >het.env
	srun --het-group=0,1 $PWD/roles.sh >het-tasks.out
	cp -r "\$ARACHNE_PLAN_DIR" $PWD/het.plans
	EOF
	J=$(sbatch --parsable --wait -o het.out \
		--arachne=model=$MODEL,global_batch=16,seq_len=1024 \
		-w node2 --gres=gpu:h100:2 --ntasks=2 : \
		-w node1 --gres=gpu:a100:2 --ntasks=2 het.sh) &&
	cat het.out het.env het-tasks.out &&
	test "$(slurm_job_state $J)" = COMPLETED &&
	grep "^ARACHNE_PLAN=$SLURM_PLAN_DIR/$J/plan.1.json$" het.env &&
	! test -e "$SLURM_PLAN_DIR/$((J + 1))" &&
	$CHECK gpus het.plans/plan.1.json >het-gpus.out &&
	printf "%s\n" node1:0 node1:1 node2:0 node2:1 >het-gpus.expected &&
	test_cmp het-gpus.expected het-gpus.out &&
	test "$(wc -l <het-tasks.out)" = 4 &&
	$CHECK roles het.plans/plan.1.json het-tasks.out
'

test_expect_success PLANNERD 'srun alone (no batch step) plans at its first step, once' '
	cat >roles-copy.sh <<-EOF &&
	#!/bin/sh
	$PWD/roles.sh
	test "\$SLURM_PROCID" != 0 || cp "\$ARACHNE_PLAN" $PWD/srun-plan.json
	EOF
	chmod +x roles-copy.sh &&
	srun -w node1,node2 -N2 --ntasks-per-node=2 --gres=gpu:2 \
		--arachne=model=$MODEL,global_batch=16,seq_len=1024 \
		$PWD/roles-copy.sh >srun-tasks.out &&
	cat srun-tasks.out &&
	test "$(wc -l <srun-tasks.out)" = 4 &&
	plan=$(sed -n "s/.*ARACHNE_PLAN=\([^ ]*\).*/\1/p" srun-tasks.out | sort -u) &&
	test "$(echo "$plan" | wc -l)" = 1 &&
	test "$(basename "$plan")" = plan.1.json &&
	$CHECK roles srun-plan.json srun-tasks.out
'

test_expect_success PLANNERD 'a job of srun steps alone: the job epilog removes its plan directory' '
	plan=$(sed -n "s/.*ARACHNE_PLAN=\([^ ]*\).*/\1/p" srun-tasks.out | sort -u) &&
	ar_wait_until 100 "the epilog to remove $(dirname "$plan")" \
		test ! -e "$(dirname "$plan")"
'

test_expect_success PLANNERD 'ARACHNE_MODEL alone enables the plugin; output= moves the plan directory' '
	mkdir -m 700 myplans &&
	cat >output.sh <<-EOF &&
	#!/bin/sh
	env | grep ^ARACHNE_PLAN=
	readlink "$SLURM_PLAN_DIR/\$SLURM_JOB_ID"
	EOF
	J=$(ARACHNE_MODEL=$MODEL ARACHNE_GLOBAL_BATCH=16 ARACHNE_SEQ_LEN=1024 \
		ARACHNE_OUTPUT=$PWD/myplans/job sbatch --parsable --wait \
		-w node2 --gres=gpu:2 -o env.out output.sh) &&
	cat env.out &&
	printf "%s\n" "ARACHNE_PLAN=$PWD/myplans/job/plan.1.json" "$PWD/myplans/job" >env.expected &&
	test_cmp env.expected env.out &&
	! test -e "$SLURM_PLAN_DIR/$J" &&
	$CHECK gpus myplans/job/plan.1.json >out-gpus.out &&
	printf "%s\n" node2:0 node2:1 >out-gpus.expected &&
	test_cmp out-gpus.expected out-gpus.out
'

test_expect_success PLANNERD 'plannerd forgets a job when its batch step ends' '
	J=$(cat plain.job) &&
	$CHECK ask "$SLURM_PLANNERD_SOCK" "{\"op\":\"get\",\"job\":\"$J\"}" >get.out &&
	cat get.out &&
	grep "\"ok\": *false" get.out &&
	grep "not_found" get.out
'

test_expect_success PLANNERD 'plan files are written whole, with no temporary left' '
	python3 -m json.tool plain.plans/plan.1.json >/dev/null &&
	python3 -m json.tool plain.plans/state.json >/dev/null &&
	test "$(ls plain.plans | grep -c tmp)" = 0
'

test_done
