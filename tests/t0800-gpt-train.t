#!/bin/sh
test_description='arachne-gpt on one process: training, determinism, errors

The reference trainer without a plan: it prints one "step K loss X" line per
step, learns (the loss falls), gives the same numbers for the same seed and
other numbers for another, and refuses bad input with exit status 2 and a
message that names what is wrong.'
. "$(dirname "$0")/lib.sh"

if ! test -x "$ARACHNE_GPT"; then
	skip_all='arachne-gpt not built (it needs MPI: configure --with-mpi)'
	test_done
fi

test_expect_success '--help names the options the tests and benchmarks use' '
	"$ARACHNE_GPT" --help >help &&
	for o in --model --steps --seed --data --plan --cluster --then; do
		grep -e "$o" help || return 1
	done
'

test_expect_success 'trains 20 steps: one line per step, the loss falls' '
	"$ARACHNE_GPT" --model gpt-tiny --steps 20 --seed 1 --micro-batch 4 \
		>run1.out 2>run1.err &&
	test "$(wc -l <run1.out)" -eq 20 &&
	test "$(grep -c "^step [0-9]* loss [0-9]*\.[0-9]\{9\}$" run1.out)" -eq 20 &&
	first=$(sed -n "s/^step 1 loss //p" run1.out) &&
	last=$(sed -n "s/^step 20 loss //p" run1.out) &&
	awk -v a="$first" -v b="$last" "BEGIN { exit !(a > 5.3 && a < 5.8 && b < a - 1.0) }" &&
	grep "arachne-gpt: step 20/20 loss" run1.err
'

test_expect_success 'the same seed gives the same losses, bit for bit' '
	"$ARACHNE_GPT" --model gpt-tiny --steps 5 --seed 1 --micro-batch 4 -q >run2.out &&
	head -5 run1.out >run1-5.out &&
	test_cmp run1-5.out run2.out
'

test_expect_success 'another seed gives other losses' '
	"$ARACHNE_GPT" --model gpt-tiny --steps 5 --seed 2 --micro-batch 4 -q >seed2.out &&
	! test_cmp run1-5.out seed2.out
'

test_expect_success 'the first loss does not depend on the micro-batch size' '
	"$ARACHNE_GPT" --model gpt-tiny --steps 1 --seed 1 --micro-batch 1 -q >mb1.out &&
	head -1 run1.out >run1-1.out &&
	# Equal but for rounding: 4 per-sample losses are summed in another
	# order, and OpenBLAS picks its kernels by CPU, so the last printed
	# digit may differ (5.552645739 against 5.552645741 on one AMD EPYC).
	"$GPT_CHECK" losses mb1.out run1-1.out 1e-6
'

test_expect_success '--data: any byte stream of at least seq_len + 2 bytes' '
	for i in 1 2 3 4 5 6 7 8; do cat "$top_srcdir/README.md"; done >data.txt &&
	"$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 --data data.txt -q >data.out &&
	test "$(wc -l <data.out)" -eq 2 &&
	! test_cmp data.out run1-5.out &&
	printf "too short" >short.txt &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 \
		--data short.txt 2>short.err &&
	grep "short.txt: 9 bytes; a sample needs 66" short.err &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 \
		--data /nonexistent 2>missing.err &&
	grep "/nonexistent: No such file" missing.err
'

test_expect_success 'bad input: exit status 2 and the reason' '
	test_expect_code 2 "$ARACHNE_GPT" --model no-such-model --steps 2 --seed 1 2>err1 &&
	grep "no-such-model" err1 &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 2>err2 &&
	grep "are required" err2 &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 \
		--then 1:x.json 2>err3 &&
	grep "then needs --plan" err3 &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 \
		--plan x.json 2>err4 &&
	grep "plan and --cluster go together" err4 &&
	test_expect_code 2 "$ARACHNE_GPT" --model llama3-8b --steps 2 --seed 1 2>err5 &&
	grep "GPT-2-style" err5
'

test_expect_success 'a plan for another number of ranks is refused' '
	gpt_clusters &&
	"$GPT_PLAN" --cluster c4.json --mbs 4 "4:n0:0,1:0-9" >tp2.json &&
	test_expect_code 2 "$ARACHNE_GPT" --model gpt-tiny --steps 2 --seed 1 \
		--plan tp2.json --cluster c4.json 2>ranks.err &&
	grep "c4.json has 4 GPUs but 1 ranks were started" ranks.err
'

test_done
