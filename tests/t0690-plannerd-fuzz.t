#!/bin/sh
test_description='plannerd: libFuzzer on the request parser for a bounded time'
. "$(dirname "$0")/lib.sh"

FUZZER="$SHARNESS_BUILD_DIRECTORY/fuzz/req-fuzz"
test -x "$FUZZER" && test_set_prereq FUZZER

test_expect_success FUZZER "req-fuzz runs ${FUZZ_SECONDS:=30} s without a crash" '
	mkdir corpus &&
	"$FUZZER" -max_total_time="$FUZZ_SECONDS" -max_len=4096 \
		-print_final_stats=1 corpus "$top_srcdir/tests/fuzz/req-corpus" \
		>fuzz.log 2>&1 &&
	grep "stat::number_of_executed_units" fuzz.log &&
	test_must_fail grep -E "ERROR: (AddressSanitizer|libFuzzer)|runtime error" fuzz.log
'

test_done
