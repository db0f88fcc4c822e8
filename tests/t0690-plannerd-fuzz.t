#!/bin/sh
test_description='libFuzzer on every parser of hostile input, each for a bounded time

The request line (plannerd), the plan, cluster and migration JSON, the INI
profiles and plannerd.conf: each target starts from its committed seed
corpus tests/fuzz/NAME-corpus and runs FUZZ_SECONDS (make check: 15 s)
under ASan and UBSan.  docs/limits.md gives the longer run.'
. "$(dirname "$0")/lib.sh"

: "${FUZZ_SECONDS:=15}"
LSAN_OPTIONS="suppressions=$top_srcdir/tests/fuzz/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS

# The suppressions name libconfig's functions: without a symbolizer
# LeakSanitizer sees only addresses in libconfig.so and reports its known
# leaks as the target's (Debian: the llvm package).  The targets that do
# not parse with libconfig need none.
if command -v llvm-symbolizer >/dev/null 2>&1 ||
   test -x "${ASAN_SYMBOLIZER_PATH:-}"; then
	test_set_prereq LLVM_SYMBOLIZER
fi

for target in req plan cluster migration profile conf; do
	fuzzer="$SHARNESS_BUILD_DIRECTORY/fuzz/$target-fuzz"
	test -x "$fuzzer" && test_set_prereq "FUZZ_$target"
	prereq="FUZZ_$target"
	test "$target" = conf && prereq="$prereq,LLVM_SYMBOLIZER"
	test_expect_success "$prereq" "$target-fuzz runs $FUZZ_SECONDS s without a finding" '
		mkdir -p "corpus-$target" &&
		"$fuzzer" -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
			-timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
			"corpus-$target" "$top_srcdir/tests/fuzz/$target-corpus" \
			>"fuzz-$target.log" 2>&1 &&
		grep "stat::number_of_executed_units" "fuzz-$target.log" &&
		test_must_fail grep -E "ERROR: (AddressSanitizer|libFuzzer)|runtime error" "fuzz-$target.log"
	'
done

test_done
