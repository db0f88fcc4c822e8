#!/bin/sh
# bounded-test.sh TEST: run one test program or script of `make check`
# (common.am's T_LOG_COMPILER), stopping it after AR_TEST_TIMEOUT seconds
# (1800 unless set) so that no test can hang the suite.  A test stopped so
# ends its TAP output with "Bail out!" and the reason, which the harness
# reports as an ERROR.  The test keeps the terminal's process group, so
# Ctrl-C reaches it; its own EXIT trap stops what it started.
limit=${AR_TEST_TIMEOUT:-1800}
timeout --foreground -k 30 "$limit" "$@"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
	echo "Bail out! $1 did not finish within $limit s (AR_TEST_TIMEOUT)"
fi
exit "$rc"
