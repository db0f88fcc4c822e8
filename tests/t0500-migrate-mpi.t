#!/bin/sh
test_description='arachne-migrate: end to end on the MPI transport

Every scenario of migrate-fixture (TP 2->4 and 4->2, a stage boundary that
moves, replicas added and removed, a GPU type change, two EP layout changes,
old replicas of two TP degrees, a node that joins, two GPUs that swap
stages) runs under mpirun with 2 to 8 ranks over real shard files;
afterwards every byte of every new shard is checked and each shard checksum
printed.'
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

# migrate SCENARIO SCALE: migration file, old shards, mpirun, verify.
migrate_scenario() {
	name=$1
	scale=$2
	np=$("$FIXTURE" migration "$name" "$name.json" "$scale") &&
	rm -rf "$name.d" && mkdir "$name.d" &&
	"$FIXTURE" init "$name.json" "$name.d" &&
	mpi "$np" --migration "$name.json" --state-dir "$name.d" \
		--timeout-s 60 >"$name.out" 2>"$name.err" &&
	grep "arachne-migrate: migrated" "$name.out" &&
	"$FIXTURE" verify "$name.json" "$name.d" >"$name.verify" &&
	! grep -v " ok$" "$name.verify" &&
	test "$(grep -c " ok$" "$name.verify")" -gt 0
}

for s in pair tp2to4 tp4to2 stages replica-add replica-remove gpu-type ep \
	ep-relayout mixed-tp join
do
	test_expect_success "migrate $s: every new shard has the right bytes" "
		migrate_scenario $s 3
	"
done

test_expect_success 'a 20 MB state in many stage-2 rounds' '
	np=$("$FIXTURE" migration join big.json 400) &&
	mkdir big.d && "$FIXTURE" init big.json big.d &&
	mpi "$np" --migration big.json --state-dir big.d -v 2>big.err &&
	rounds=$(sed -n "s/.* \([0-9]*\) rounds;.*/\1/p" big.err) &&
	test "$rounds" -gt 10 &&
	"$FIXTURE" verify big.json big.d >big.verify &&
	! grep -v " ok$" big.verify
'

# A node named after this host makes the ranks map themselves by host name
# (what srun on a real allocation gives); the result must be the same.
test_expect_success 'ranks placed by host name when the nodes are real hosts' '
	host=$(hostname | cut -d. -f1) &&
	"$FIXTURE" migration tp4to2 host0.json 3 >/dev/null &&
	sed -e "s/\"name\":\"n0\"/\"name\":\"$host\"/" host0.json >host.json &&
	grep "\"$host\"" host.json &&
	mkdir host.d && "$FIXTURE" init host.json host.d &&
	test -f "host.d/rank-$host-3.bin" &&
	mpi 4 --migration host.json --state-dir host.d >host.out &&
	"$FIXTURE" verify host.json host.d >host.verify &&
	! grep -v " ok$" host.verify
'

test_expect_success 'a fresh start has nothing to migrate and writes nothing' '
	np=$("$FIXTURE" migration fresh fresh.json 1) &&
	rm -rf fresh.d && mkdir fresh.d &&
	mpi "$np" --migration fresh.json --state-dir fresh.d >fresh.out &&
	grep "nothing to migrate" fresh.out &&
	test -z "$(ls -A fresh.d)"
'

test_expect_success 'the wrong number of ranks is refused before anything moves' '
	np=$("$FIXTURE" migration stages wrong.json 1) &&
	rm -rf wrong.d && mkdir wrong.d &&
	"$FIXTURE" init wrong.json wrong.d &&
	(cd wrong.d && md5sum rank-* >../wrong.md5) &&
	test_expect_code 2 mpi 2 --migration wrong.json --state-dir wrong.d \
		2>wrong.err &&
	grep "the migration has 4 GPUs but 2 ranks were started" wrong.err &&
	(cd wrong.d && md5sum -c ../wrong.md5)
'

test_expect_success 'a shard file that does not match the old plan stops every rank' '
	np=$("$FIXTURE" migration tp2to4 mism.json 1) &&
	"$FIXTURE" migration stages other.json 1 >/dev/null &&
	rm -rf mism.d && mkdir mism.d &&
	"$FIXTURE" init mism.json mism.d &&
	mkdir other.d && "$FIXTURE" init other.json other.d &&
	cp other.d/rank-n0-1.bin mism.d/rank-n0-1.bin &&
	(cd mism.d && md5sum rank-* >../mism.md5) &&
	test_expect_code 1 mpi "$np" --migration mism.json --state-dir mism.d \
		--timeout-s 20 2>mism.err &&
	grep "rank-n0-1.bin: holds 9 shards, the old plan gives this GPU 18" mism.err &&
	test "$(grep -c "nothing was moved" mism.err)" -eq 3 &&
	(cd mism.d && md5sum -c ../mism.md5) &&
	test -z "$(ls -A mism.d | grep migrating)"
'

test_expect_success 'a malformed migration file is named with its problem' '
	"$FIXTURE" migration pair bad.json 1 >/dev/null &&
	sed -e "s/\"arachne_migration\":1/\"arachne_migration\":7/" bad.json >bad7.json &&
	test_expect_code 2 mpi 2 --migration bad7.json --state-dir . 2>bad.err &&
	grep "bad7.json: migration: \"arachne_migration\" must be 1" bad.err
'

test_expect_success 'bad options are refused with exit status 2' '
	test_expect_code 2 "$MIGRATE" --state-dir . 2>opt.err &&
	grep "give --migration FILE" opt.err &&
	test_expect_code 2 "$MIGRATE" --migration x --state-dir . \
		--transport tcp 2>opt.err &&
	grep "expected mpi or nccl" opt.err &&
	test_expect_code 2 "$MIGRATE" --migration x --state-dir . \
		--timeout-s -1 2>opt.err &&
	grep "positive number of seconds" opt.err
'

test_done
