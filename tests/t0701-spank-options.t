#!/bin/sh
test_description='arachne.so on a real Slurm: the --arachne option, refusals, jobs without it'
. "$(dirname "$0")/lib.sh"

slurm_setup 17100
cd "$SLURM_DIR/work" || exit 1

test_expect_success 'sbatch --help lists --arachne and its keys' '
	sbatch --help >help.out &&
	grep -e "--arachne=\[key=value,...\]" help.out &&
	grep "mode=advise|enforce" help.out &&
	grep "join=JOBID" help.out
'

test_expect_success 'srun and salloc know --arachne too' '
	srun --help | grep -e "--arachne" &&
	salloc --help | grep -e "--arachne"
'

refused() {	# expected-text sbatch-args...
	want=$1; shift
	test_must_fail sbatch --parsable -o /dev/null "$@" --wrap true \
		>refused.out 2>refused.err &&
	cat refused.err &&
	grep -F -e "$want" refused.err &&
	test_must_be_empty refused.out
}

test_expect_success 'an unknown key is refused, naming the key and the valid ones' '
	refused "unknown key '\''colour'\'' (expected model, global_batch, seq_len, planner, mode, output, join, signal)" \
		--arachne=model=llama3-8b,colour=blue
'

test_expect_success 'bad values are refused, naming the key and what it takes' '
	refused "mode=maybe: expected one of advise, enforce" --arachne=model=m,mode=maybe &&
	refused "global_batch=0: expected an integer from 1 to" --arachne=model=m,global_batch=0 &&
	refused "seq_len=1k: expected an integer" --arachne=model=m,seq_len=1k &&
	refused "planner=magic: expected one of arachne, sailor" --arachne=model=m,planner=magic &&
	refused "output=plans: expected an absolute path" --arachne=model=m,output=plans &&
	refused "'\''model'\'': expected key=value" --arachne=model
'

test_expect_success 'a bad ARACHNE_* variable is refused, naming the variable' '
	ARACHNE_GLOBAL_BATCH=lots refused "ARACHNE_GLOBAL_BATCH: global_batch=lots" --arachne=model=m
'

test_expect_success 'a job with no model anywhere is refused' '
	refused "no model to plan for" --arachne
'

test_expect_success 'joining a job that does not exist is refused' '
	refused "join=4000000: no such job" --arachne=join=4000000
'

test_expect_success 'no refused submission left a job behind' '
	test -z "$(squeue -h -o %i)"
'

test_expect_success 'a job without --arachne has no ARACHNE_ variables' '
	cat >plain.sh <<-\EOF &&
	#!/bin/sh
	env | grep "^ARACHNE_" | sed "s/^/batch /" || :
	srun -l sh -c "env | grep ^ARACHNE_ || :" | sed "s/^/step /"
	echo done
	EOF
	sbatch --wait -N3 --gres=gpu:1 -o plain.out plain.sh &&
	cat plain.out &&
	test "$(cat plain.out)" = done &&
	test "$(ls "$SLURM_PLAN_DIR")" = ""
'

test_expect_success 'start a job of root that others will try to join' '
	ROOTJOB=$(sbatch --parsable -o /dev/null -w node1 --gres=gpu:1 \
		--arachne=model=llama3-8b,mode=advise --wrap "sleep 60") &&
	ar_wait_until 100 "job $ROOTJOB to run" slurm_job_running $ROOTJOB &&
	echo $ROOTJOB >rootjob
'

test_expect_success 'another user cannot join it: sbatch refuses' '
	ROOTJOB=$(cat rootjob) &&
	test_must_fail runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" \
		sbatch -o /dev/null --gres=gpu:1 --arachne=join=$ROOTJOB \
		--wrap true 2>join.err &&
	cat join.err &&
	grep "join=$ROOTJOB: job $ROOTJOB belongs to root; only its owner, root or SlurmUser may join it" join.err
'

test_expect_success 'another user cannot join it: slurmstepd refuses too' '
	ROOTJOB=$(cat rootjob) &&
	mkdir -m 777 nobody &&
	J=$(sbatch --parsable --uid=nobody --chdir="$PWD/nobody" \
		-o "$PWD/nobody/out" -e "$PWD/nobody/err" -w node2 --gres=gpu:1 \
		--arachne=join=$ROOTJOB,mode=enforce --wrap "echo joined") &&
	slurm_wait_gone $J &&
	cat nobody/err &&
	grep "arachne: error: job $J: join=$ROOTJOB: job $ROOTJOB belongs to root" nobody/err &&
	test_must_fail grep joined nobody/out &&
	test "$(slurm_job_state $J)" = FAILED &&
	{ ! test -f "$SLURM_PLAN_DIR/$ROOTJOB/state.json" ||
	  test_must_fail grep -w "$J" "$SLURM_PLAN_DIR/$ROOTJOB/state.json"; }
'

test_expect_success 'scancel the job' '
	scancel $(cat rootjob) && slurm_wait_gone $(cat rootjob)
'

test_done
