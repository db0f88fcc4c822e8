#!/bin/sh
test_description='arachne-migrate --rendezvous: ranks started apart meet

The ranks of a migration are started separately, as one srun in each
allocation of an elastic job starts them: as separate processes, and as two
separate mpiruns.  They meet through a private directory and move the state
over TCP; every byte of every new shard is checked.  A rank that dies, a
rank that never comes and processes with nothing to move are handled with
the reason and the old files intact.'
. "$(dirname "$0")/lib.sh"

MIGRATE="$top_builddir/migrate/arachne-migrate"
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
: "${MPIRUN:=$(command -v mpirun)}"

if ! test -x "$MIGRATE" || ! test -x "$FIXTURE"; then
	skip_all='arachne-migrate or migrate/test/migrate-fixture is not built'
	test_done
fi
if test -x "$MPIRUN"; then
	test_set_prereq MPIRUN
fi

# Every process of a test runs in the background; none may outlive it.
RDZV=$(mktemp -d /tmp/ar-rdzv.XXXXXX) || exit 1
cleanup 'rm -rf "$RDZV"'

# apart NAME NP [ARGS...]: NP processes, one per rank, started one by one;
# waits for all (each bounded by --wait-s / --timeout-s) and fails when
# one did.
apart() {
	name=$1
	np=$2
	shift 2
	pids=
	r=0
	while test $r -lt "$np"; do
		"$MIGRATE" --migration "$name.json" --state-dir "$name.d" \
			--rendezvous "$RDZV" --rank $r --wait-s 30 "$@" \
			>"$name.out.$r" 2>"$name.err.$r" &
		pids="$pids $!"
		r=$((r + 1))
	done
	failed=0
	for p in $pids; do
		wait "$p" || failed=1
	done
	return $failed
}

# scenario NAME SCALE [FIXTURE-SCENARIO]: NAME.json and the old shards.
scenario() {
	name=$1
	np=$("$FIXTURE" migration "${3:-$name}" "$name.json" "$2") &&
	rm -rf "$name.d" && mkdir "$name.d" &&
	"$FIXTURE" init "$name.json" "$name.d" &&
	echo "$np" >"$name.np"
}

verified() {
	"$FIXTURE" verify "$1.json" "$1.d" >"$1.verify" &&
	! grep -v " ok$" "$1.verify" &&
	test "$(grep -c " ok$" "$1.verify")" -gt 0
}

for s in pair tp2to4 stages replica-remove gpu-type ep-relayout mixed-tp join
do
	test_expect_success "$s: ranks started one by one meet and migrate" "
		scenario $s 3 &&
		apart $s \$(cat $s.np) &&
		grep 'ranks met in' $s.out.0 &&
		grep 'arachne-migrate: migrated .* over tcp' $s.out.0 &&
		verified $s &&
		test -z \"\$(ls $RDZV)\"
	"
done

test_expect_success 'a 20 MB state in many rounds' '
	scenario big 400 join &&
	apart big "$(cat big.np)" -v &&
	rounds=$(sed -n "s/.* \([0-9]*\) rounds;.*/\1/p" big.err.0) &&
	test "$rounds" -gt 10 &&
	verified big
'

# Two launchers, as two allocations: mpirun #1 starts the GPUs of nodes n0
# and n1 (the running job), mpirun #2 those of n2 (the allocation that
# joins).  Each process names its node and GPU from its launcher's rank.
test_expect_success MPIRUN 'two separate mpiruns: the running job and the joining one' '
	scenario join 3 &&
	cat >rank.sh <<-EOF &&
	#!/bin/sh
	r=\$((\$1 + OMPI_COMM_WORLD_RANK))
	exec "$MIGRATE" --migration join.json --state-dir join.d \
		--rendezvous "$RDZV" --node n\$((r / 2)) --gpu \$((r % 2)) --wait-s 60
	EOF
	chmod +x rank.sh &&
	"$MPIRUN" --oversubscribe --allow-run-as-root -np 4 ./rank.sh 0 \
		>job.out 2>job.err &
	first=$! &&
	sleep 1 &&
	"$MPIRUN" --oversubscribe --allow-run-as-root -np 2 ./rank.sh 4 \
		>joiner.out 2>joiner.err &&
	wait $first &&
	grep "6 ranks met" job.out &&
	grep "migrated" job.out &&
	verified join
'

test_expect_success 'a process whose GPU holds no state exits at once' '
	"$MIGRATE" --migration join.json --state-dir join.d \
		--rendezvous "$RDZV" --node n7 --gpu 0 >none.out &&
	grep "n7 GPU 0 is not on a node of the migration: nothing to move here" none.out &&
	test_expect_code 2 "$MIGRATE" --migration join.json --state-dir join.d \
		--rendezvous "$RDZV" --rank 6 2>badrank.err
'

# fault NAME KIND RANK: ranks apart, one of them dies or stops; every other
# rank fails with the reason, the old files are untouched, nothing staged.
fault_run() {
	d=$1
	rm -rf "$d.d" && mkdir "$d.d" &&
	"$FIXTURE" init join50.json "$d.d" &&
	(cd "$d.d" && md5sum rank-* >../$d.md5) &&
	cp join50.json "$d.json" &&
	ARACHNE_MIGRATE_FAULT=$2:$3 &&
	export ARACHNE_MIGRATE_FAULT &&
	! apart "$d" 6 --timeout-s 3 &&
	unset ARACHNE_MIGRATE_FAULT &&
	(cd "$d.d" && md5sum -c ../$d.md5) &&
	test -z "$(ls -A "$d.d" | grep -v "^rank-")"
}

test_expect_success 'setup: a join migration of 50 units' '
	"$FIXTURE" migration join join50.json 50 >/dev/null
'

test_expect_success 'a rank killed mid-migration: the others stop at once, naming it' '
	start=$(date +%s) &&
	fault_run kill2 kill 2 &&
	test $(($(date +%s) - start)) -lt 3 &&
	for r in 0 1 3 4 5; do
		grep "rank $r .*: migration failed: rank 2 is gone; old shard files unchanged" kill2.err.$r ||
		return 1
	done
'

test_expect_success 'a rank that never comes: every rank gives up within --wait-s' '
	cp join.json late.json && rm -rf late.d && mkdir late.d &&
	"$FIXTURE" init late.json late.d &&
	start=$(date +%s) &&
	! apart late 5 --wait-s 2 &&
	test $(($(date +%s) - start)) -lt 10 &&
	for r in 0 1 2 3 4; do
		grep "rank 5 did not arrive within 2 s; nothing was moved" late.err.$r ||
		return 1
	done &&
	test -z "$(ls -A late.d | grep -v "^rank-")" &&
	test -z "$(ls $RDZV)"
'

test_done
