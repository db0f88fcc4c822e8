#!/bin/sh
test_description='arachne-migrate: a rank that dies or stalls mid-migration

One rank is killed (SIGKILL) or stopped forever just before the first
round of stage 2 (ARACHNE_MIGRATE_FAULT).  Every rank must exit with an
error, the old shard files must be byte for byte what they were, and no
staged file may be left behind.'
. "$(dirname "$0")/lib.sh"

MIGRATE="$top_builddir/migrate/arachne-migrate"
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
: "${MPIRUN:=$(command -v mpirun)}"

if ! test -x "$MIGRATE" || ! test -x "$MPIRUN"; then
	skip_all='arachne-migrate or mpirun not built/found (configure --with-mpi)'
	test_done
fi

mpi() {
	np=$1
	shift
	"$MPIRUN" --oversubscribe --allow-run-as-root -np "$np" "$MIGRATE" "$@"
}

test_expect_success 'setup: a join migration over six ranks' '
	np=$("$FIXTURE" migration join join.json 50) &&
	test "$np" -eq 6 &&
	echo "$np" >np
'

# fault KIND RANK: run with the fault, expect failure and untouched files.
fault_run() {
	kind=$1
	rank=$2
	d=$kind-$rank.d
	rm -rf "$d" && mkdir "$d" &&
	"$FIXTURE" init join.json "$d" &&
	(cd "$d" && md5sum rank-* >../$d.md5) &&
	! ARACHNE_MIGRATE_FAULT=$kind:$rank mpi "$(cat np)" \
		--migration join.json --state-dir "$d" --timeout-s 3 \
		>"$d.out" 2>"$d.err" &&
	(cd "$d" && md5sum -c ../$d.md5) &&
	test -z "$(ls -A "$d" | grep -v "^rank-")" &&
	test "$(ls "$d" | wc -l)" -eq "$(wc -l <$d.md5)" &&
	! grep "arachne-migrate: migrated" "$d.out"
}

# The launcher tears the job down when a rank dies; each survivor reports
# from its SIGTERM handler.  Open MPI may drop the output of a rank it
# kills a moment later, and on a loaded machine it drops most of them, so
# one survivor must be heard; the job's failure and the untouched files
# are what fault_run checks for every rank.
test_expect_success 'a rank killed mid-migration: every rank stops, old files intact' '
	fault_run kill 2 &&
	test "$(grep -c "migration aborted, old shard files unchanged" kill-2.d.err)" -ge 1
'

test_expect_success 'the first rank killed: the same' '
	fault_run kill 0 &&
	test "$(grep -c "old shard files unchanged" kill-0.d.err)" -ge 1
'

# A stopped rank is invisible to the launcher: its peers time out, name a
# peer they waited for, clean up and end the job with MPI_Abort (whose
# banner mpirun sometimes garbles, so the test does not read it).  Rank 3
# (node 1, GPU 1) sends both GPUs of the joining node layers in stage 2,
# so they wait on it.
test_expect_success 'a stalled rank: peers time out, name it, old files intact' '
	fault_run stall 3 &&
	grep "no progress for 3.0 s waiting for rank 3" stall-3.d.err &&
	test "$(grep -c "old shard files unchanged" stall-3.d.err)" -ge 1
'

test_expect_success 'after a failure the same migration still succeeds' '
	mpi "$(cat np)" --migration join.json --state-dir kill-2.d \
		--timeout-s 30 >retry.out &&
	grep "arachne-migrate: migrated" retry.out &&
	"$FIXTURE" verify join.json kill-2.d >retry.verify &&
	! grep -v " ok$" retry.verify
'

test_done
