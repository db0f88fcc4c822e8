#!/bin/sh
test_description='the system tests pass from a build directory whose absolute path is 150 characters'
. "$(dirname "$0")/lib.sh"

# Users build deep down (~/src/hpc/site-tools/arachne-0.1.0/_build/...),
# and a Unix socket address holds 107 bytes.  Nothing is rebuilt here: a
# directory whose absolute path is 150 characters stands for the build
# tree, its entries links to this tree's and its tests/ a real folder, so
# that every trash directory, where a test runs and makes its files, lies
# below the long path (in AR_SOCK_DIR, removed at exit).  Then every other
# system test runs from there.
# (The unit tests make their sockets under /tmp: spank/test/client.c.)

# The inner Slurm tests run beside this suite's own: their ports are moved
# by 2000 from this tree's (sharness.d/slurm.sh), so the two never collide.
port_offset=${AR_SLURM_PORT_OFFSET:-$(( $(printf '%s' "$top_builddir" | cksum | cut -d' ' -f1) % 100 * 40 ))}
inner_port_offset=$(( (port_offset + 2000) % 4000 ))

test_expect_success 'setup: a build directory of 150 characters' '
	pad=$((150 - ${#AR_SOCK_DIR} - 1)) &&
	long=$(printf "%s/%0${pad}d" "$AR_SOCK_DIR" 0) &&
	test ${#long} = 150 &&
	mkdir -p "$long/tests" &&
	for f in "$top_builddir"/*; do
		test "${f##*/}" = tests || ln -s "$f" "$long/${f##*/}" || return 1
	done &&
	if test -d "$top_builddir/tests/fuzz"; then
		ln -s "$top_builddir/tests/fuzz" "$long/tests/fuzz"
	fi &&
	echo "$long" >long
'

# inner TEST: run the system test TEST from the long build directory.
inner() {
	long=$(cat long) &&
	name=${1##*/} &&
	(
		cd "$long/tests" &&
		SHARNESS_TEST_DIRECTORY=$long/tests \
		SHARNESS_BUILD_DIRECTORY=$long/tests \
		top_builddir=$long \
		AR_SLURM_PORT_OFFSET=$inner_port_offset \
		FUZZ_SECONDS=2 \
		sh "$1" -v
	) >"$name.out" 2>&1
	rc=$?
	if test $rc != 0; then
		# Into this test's own log, as TAP comments (sharness keeps fd 5
		# for its output): what the inner test said before it failed.
		{
			echo "$name failed (exit $rc) from $long; what came before its first failure:"
			awk '{ line[NR] = $0 }
			     /^not ok/ { for (i = NR - 30; i <= NR; i++) if (i > 0) print line[i]; exit }' \
				"$name.out"
		} | sed "s/^/# /" >&5
		return 1
	fi
}

ran=0
for t in "$top_srcdir"/tests/t[0-9]*.t; do
	case ${t##*/} in
	t0900-*) continue ;;
	esac
	ran=$((ran + 1))
	test_expect_success "${t##*/} passes from the long build directory" '
		inner "$t"
	'
done

test_expect_success 'they ran below the long path, where a socket would not fit' '
	long=$(cat long) &&
	test "$(ls "$long/tests/test-results" | wc -l)" = "$ran" &&
	sock="$long/tests/trash directory.t0602-plannerd-robust/plannerd.sock" &&
	test ${#sock} -gt 107
'

test_done
