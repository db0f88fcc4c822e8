# arachne.sh - sourced by sharness for every system test: where the built
# programs and the profiles are, a short private directory for sockets,
# clean-up on every exit, and bounded waits.  Every name here starts with
# ar_ or AR_: sharness.d/ files share one namespace.
: "${top_builddir:=$SHARNESS_BUILD_DIRECTORY/..}"
: "${top_srcdir:=$SHARNESS_TEST_SRCDIR/..}"
ARACHNE_PLAN="$top_builddir/policy/arachne-plan"
AR_PROFILES="$top_srcdir/profiles"
CLUSTERS="$top_srcdir/profiles/clusters"
export ARACHNE_PLAN AR_PROFILES CLUSTERS top_builddir top_srcdir

# ar_at_exit CMD: run CMD when the test script exits, whatever the outcome
# (sharness keeps the trash directory of a failed test; daemons and the
# socket directory go all the same).  The last one added runs first.
AR_AT_EXIT=:
ar_at_exit() {
	AR_AT_EXIT="$1; $AR_AT_EXIT"
}
trap 'ar_rc=$?; eval "$AR_AT_EXIT"; (exit $ar_rc); die' EXIT
trap 'exit 143' HUP INT TERM

# A Unix socket address holds 107 bytes, and the trash directory lies
# wherever the tree is built: every socket a test makes goes in
# AR_SOCK_DIR, a short directory of its own under /tmp.
AR_SOCK_DIR=$(mktemp -d /tmp/ar.XXXXXX) || exit 1
ar_at_exit 'rm -rf "$AR_SOCK_DIR"'

# Unless sharness runs verbose, what a test prints goes nowhere, and a
# failure in CI, which keeps only the logs, would not say why.  It goes to
# AR_SOCK_DIR/output instead, and a failure's TAP diagnostics end with the
# last lines the failing test printed (test_failure_ below).
AR_OUTPUT=
if test "$verbose" != t; then
	AR_OUTPUT=$AR_SOCK_DIR/output
	exec 3>"$AR_OUTPUT" 4>&3
fi

# ar_printed_last: the last 25 lines the running test printed, as TAP
# diagnostics; its body, echoed by sharness with a tab first, left out.
ar_printed_last() {
	test -s "$AR_OUTPUT" || return 0
	echo "# what it printed last:"
	awk '/^expecting success:/ { n = 0; next }
	     /^\t/ { next }
	     { out[n++ % 25] = $0 }
	     END { for (i = (n > 25 ? n - 25 : 0); i < n; i++)
			print "#   " out[i % 25] }' "$AR_OUTPUT"
}

# sharness's own test_failure_, with what the test printed after its body.
test_failure_() {
	test_failure=$((test_failure + 1))
	say_color error "not ok $test_count - $1"
	shift
	echo "$@" | sed -e 's/^/#	/'
	ar_printed_last
	test "$immediate" = "" || { EXIT_OK=t; exit 1; }
}

# ar_wait_until TENTHS WHAT COMMAND...: run COMMAND every 0.1 s until it
# succeeds, at most TENTHS times; then fail, saying that WHAT never came.
ar_wait_until() {
	ar_tenths=$1 ar_what=$2
	shift 2
	ar_i=0
	until "$@"; do
		ar_i=$((ar_i + 1))
		if test "$ar_i" -ge "$ar_tenths"; then
			echo "timed out after $((ar_tenths / 10)) s waiting for $ar_what" >&2
			return 1
		fi
		sleep 0.1
	done
}

# ar_bounded SECONDS WHAT COMMAND...: run COMMAND (a program, not a shell
# function), killed after SECONDS with a message naming WHAT.  A command
# killed so exits 142 (as if by SIGALRM): test_must_fail takes that for a
# crash, never for the failure it expects.
ar_bounded() {
	ar_limit=$1 ar_what=$2
	shift 2
	timeout --foreground -k 5 "$ar_limit" "$@"
	ar_rc=$?
	if test "$ar_rc" = 124 || test "$ar_rc" = 137; then
		echo "timed out after $ar_limit s waiting for $ar_what" >&2
		return 142
	fi
	return "$ar_rc"
}
