#!/bin/sh
test_description='the MPI transport splits transfers into messages

MPI counts are int, so the MPI transport sends a transfer as messages of at
most 1 GiB, or of ARACHNE_MIGRATE_MPI_CHUNK bytes.  With a small chunk a few
MiB take hundreds of messages: migrate/test/mpi-chunks counts every message
sent (MPI profiling interface) and checks every byte received, and a whole
migration runs through arachne-migrate.  Transfers over 1 GiB in the
default messages run with --long (TEST_LONG=t) only: they need 9 GB of
memory.'
. "$(dirname "$0")/lib.sh"

CHUNKS="$top_builddir/migrate/test/mpi-chunks"
MIGRATE="$top_builddir/migrate/arachne-migrate"
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
: "${MPIRUN:=$(command -v mpirun)}"

if ! test -x "$CHUNKS" || ! test -x "$MPIRUN"; then
	skip_all='mpi-chunks or mpirun not built/found (configure --with-mpi)'
	test_done
fi

mpi() {
	"$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$@"
}

# Both ranks send 5 MiB + 12345 bytes (81 messages of 64 KiB), exactly
# 64 KiB (1) and 1000 bytes (1): 83 messages each.
test_expect_success 'a few MiB in 64 KiB messages, every byte checked' '
	ARACHNE_MIGRATE_MPI_CHUNK=65536 mpi "$CHUNKS" 5254225 65536 1000 \
		>small.out &&
	test "$(grep -c ": ok$" small.out)" -eq 2 &&
	grep "^messages 166 largest 65536$" small.out
'

test_expect_success 'without the variable the same transfers are one message each' '
	mpi "$CHUNKS" 5254225 65536 1000 >whole.out &&
	test "$(grep -c ": ok$" whole.out)" -eq 2 &&
	grep "^messages 6 largest 5254225$" whole.out
'

# A receive is posted with the size of the message it matches: ranks given
# different sizes use the smallest (4 KiB: 1283 + 16 + 1 messages each).
test_expect_success 'ranks given different chunks agree on the smallest' '
	ARACHNE_MIGRATE_MPI_CHUNK=65536 mpi "$CHUNKS" --rank1-chunk 4096 \
		5254225 65536 1000 >agree.out &&
	test "$(grep -c ": ok$" agree.out)" -eq 2 &&
	grep "^messages 2600 largest 4096$" agree.out
'

test_expect_success 'a bad chunk on one rank stops both with the reason' '
	test_expect_code 1 mpi "$CHUNKS" --rank1-chunk 100 4096 \
		>bad.out 2>/dev/null &&
	test "$(grep -c "ARACHNE_MIGRATE_MPI_CHUNK must be a number of bytes from 1024" bad.out)" -eq 2 &&
	test_expect_code 1 env ARACHNE_MIGRATE_MPI_CHUNK=12x \
		"$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$CHUNKS" \
		4096 >bad2.out 2>/dev/null &&
	test "$(grep -c "must be a number of bytes" bad2.out)" -eq 2
'

test_expect_success 'a whole migration in 4 KiB messages has every byte right' '
	np=$("$FIXTURE" migration join join.json 400) &&
	mkdir join.d && "$FIXTURE" init join.json join.d &&
	ARACHNE_MIGRATE_MPI_CHUNK=4096 "$MPIRUN" --oversubscribe \
		--allow-run-as-root -np "$np" "$MIGRATE" \
		--migration join.json --state-dir join.d >join.out &&
	grep "arachne-migrate: migrated" join.out &&
	"$FIXTURE" verify join.json join.d >join.verify &&
	! grep -v " ok$" join.verify
'

# 2.2 GB each way: messages of 1 GiB, 1 GiB and the rest, beyond INT_MAX.
test_expect_success EXPENSIVE 'over 2 GiB each way in 1 GiB messages' '
	mpi "$CHUNKS" 2200000000 >big.out &&
	test "$(grep -c ": ok$" big.out)" -eq 2 &&
	grep "^messages 6 largest 1073741824$" big.out
'

test_done
