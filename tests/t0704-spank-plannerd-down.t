#!/bin/sh
test_description='arachne.so on a real Slurm: plannerd down or silent, mode=advise runs, mode=enforce fails, both within timeout_ms'
. "$(dirname "$0")/lib.sh"

slurm_setup 17130
cd "$SLURM_DIR/work" || exit 1
MODEL=gpt-neo-2.7b

cat >job.sh <<\EOF
#!/bin/sh
echo "script ran plan=${ARACHNE_PLAN-none}"
srun -l true
EOF

# run_job MODE NAME: sbatch --wait the job, record its state and run time
# (slurmctld's RunTime, which leaves out the wait for scheduling).
run_job() {
	J=$(sbatch --parsable --wait -w node2 --gres=gpu:h100:2 -o "$2.out" \
		-e "$2.err" --arachne=model=$MODEL,mode=$1 job.sh)
	echo "$(slurm_job_state $J)" >"$2.state"
	scontrol show job "$J" |
		sed -n "s/.*RunTime=\([0-9:]*\) .*/\1/p" |
		awk -F: "{ print \$1 * 3600 + \$2 * 60 + \$3 }" >"$2.secs"
	cat "$2.out" "$2.err" "$2.state" "$2.secs"
}

# Two plannerd exchanges (the batch step and its srun step) of at most
# timeout_ms each, and a second of Slurm's own start and end.
within_bound() {
	test "$(cat "$1.secs")" -le "$((2 * SLURM_TIMEOUT_MS / 1000 + 2))"
}

test_expect_success 'plannerd not running: mode=advise runs the job with a warning' '
	run_job advise advise &&
	test "$(cat advise.state)" = COMPLETED &&
	grep "^script ran plan=none$" advise.out &&
	grep "arachne: warning: job [0-9]*: cannot reach plannerd at $SLURM_PLANNERD_SOCK: No such file or directory; running without a plan (mode=advise)" advise.err &&
	within_bound advise
'

test_expect_success 'plannerd not running: mode=enforce fails the job and says why' '
	run_job enforce enforce &&
	test "$(cat enforce.state)" = FAILED &&
	test_must_fail grep "script ran" enforce.out &&
	grep "arachne: error: job [0-9]*: cannot reach plannerd at $SLURM_PLANNERD_SOCK: No such file or directory (mode=enforce)" enforce.err &&
	within_bound enforce
'

test_expect_success PLANNERD 'start plannerd, then stop it (SIGSTOP): it accepts but never answers' '
	slurm_plannerd_start &&
	kill -STOP "$(cat "$SLURM_DIR/plannerd.pid")"
'

test_expect_success PLANNERD 'plannerd silent: mode=advise runs after timeout_ms with a warning' '
	run_job advise slow-advise &&
	test "$(cat slow-advise.state)" = COMPLETED &&
	grep "^script ran plan=none$" slow-advise.out &&
	grep "arachne: warning: job [0-9]*: plannerd at $SLURM_PLANNERD_SOCK did not answer within $SLURM_TIMEOUT_MS ms; running without a plan (mode=advise)" slow-advise.err &&
	within_bound slow-advise
'

test_expect_success PLANNERD 'plannerd silent: mode=enforce fails after timeout_ms and says why' '
	run_job enforce slow-enforce &&
	test "$(cat slow-enforce.state)" = FAILED &&
	test_must_fail grep "script ran" slow-enforce.out &&
	grep "arachne: error: job [0-9]*: plannerd at $SLURM_PLANNERD_SOCK did not answer within $SLURM_TIMEOUT_MS ms (mode=enforce" slow-enforce.err &&
	within_bound slow-enforce
'

test_expect_success PLANNERD 'plannerd back (SIGCONT): the same job gets a plan' '
	kill -CONT "$(cat "$SLURM_DIR/plannerd.pid")" &&
	run_job enforce back &&
	test "$(cat back.state)" = COMPLETED &&
	grep "^script ran plan=$SLURM_PLAN_DIR/[0-9]*/plan.1.json$" back.out &&
	test_must_fail grep arachne back.err
'

test_done
