#!/bin/sh
test_description='arachne-migrate: the NCCL transport on GPUs

Runs the MPI scenarios again with --transport nccl, every rank on its own
GPU (device = the GPU index of its rank in the migration).  Needs a build
with NCCL and at least 2 GPUs on this machine; without them the transfers
are skipped with the reason, and what does run is that every rank stops
cleanly when it has no device.'
. "$(dirname "$0")/lib.sh"

MIGRATE="$top_builddir/migrate/arachne-migrate"
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
: "${MPIRUN:=$(command -v mpirun)}"

if ! test -x "$MIGRATE" || ! test -x "$MPIRUN"; then
	skip_all='arachne-migrate or mpirun not built/found (configure --with-mpi)'
	test_done
fi
if ! ldd "$MIGRATE" 2>/dev/null | grep -q libnccl &&
   ! grep -q "define HAVE_NCCL 1" "$top_builddir/config.h"; then
	skip_all='built without NCCL (configure --with-nccl)'
	test_done
fi
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
: "${ngpus:=0}"
if test "$ngpus" -ge 2; then
	test_set_prereq GPUS
else
	test_set_prereq NOGPU
	say "# SKIP the transfers: needs 2 GPUs, found $ngpus (nvidia-smi -L)"
fi

mpi() {
	np=$1
	shift
	"$MPIRUN" --oversubscribe --allow-run-as-root -np "$np" "$MIGRATE" "$@"
}

# Without a usable device every rank learns it before NCCL initializes.
test_expect_success NOGPU 'no GPU: every rank stops with the reason, files untouched' '
	np=$("$FIXTURE" migration pair nogpu.json 1) &&
	mkdir nogpu.d && "$FIXTURE" init nogpu.json nogpu.d &&
	(cd nogpu.d && md5sum rank-* >../nogpu.md5) &&
	test_expect_code 1 mpi "$np" --migration nogpu.json \
		--state-dir nogpu.d --transport nccl --timeout-s 20 2>nogpu.err &&
	test "$(grep -c "nccl transport: no CUDA device" nogpu.err)" -eq "$np" &&
	(cd nogpu.d && md5sum -c ../nogpu.md5) &&
	test -z "$(ls -A nogpu.d | grep migrating)"
'

# Ranks started apart (--rendezvous) bootstrap NCCL over the rendezvous;
# without a device each says so and nothing moves.
RDZV=$(mktemp -d /tmp/ar-nccl.XXXXXX) || exit 1
ar_at_exit 'rm -rf "$RDZV"'

# apart NAME NP [ARGS...]: NP processes, one per rank, each on its own.
apart() {
	name=$1 np=$2 pids=
	shift 2
	r=0
	while test $r -lt "$np"; do
		"$MIGRATE" --migration "$name.json" --state-dir "$name.d" \
			--rendezvous "$RDZV" --rank $r --wait-s 30 --transport nccl \
			"$@" >"$name.out.$r" 2>"$name.err.$r" &
		pids="$pids $!"
		r=$((r + 1))
	done
	failed=0
	for p in $pids; do
		wait "$p" || failed=1
	done
	return $failed
}

test_expect_success NOGPU 'no GPU, ranks started apart: each stops with the reason, files untouched' '
	np=$("$FIXTURE" migration pair apart.json 1) &&
	mkdir apart.d && "$FIXTURE" init apart.json apart.d &&
	(cd apart.d && md5sum rank-* >../apart.md5) &&
	! apart apart "$np" --timeout-s 20 &&
	test "$(cat apart.err.* | grep -c "no CUDA device.*nothing was moved")" -eq "$np" &&
	(cd apart.d && md5sum -c ../apart.md5)
'

test_expect_success GPUS 'nccl over a rendezvous: ranks started apart migrate tp2to4' '
	np=$("$FIXTURE" migration tp2to4 rdzv.json 100) &&
	if test $np -le $ngpus; then
		mkdir rdzv.d && "$FIXTURE" init rdzv.json rdzv.d &&
		apart rdzv "$np" &&
		grep "over nccl" rdzv.out.0 &&
		"$FIXTURE" verify rdzv.json rdzv.d >rdzv.verify &&
		! grep -v " ok$" rdzv.verify
	else
		say "needs $np GPUs, found $ngpus"
	fi
'

# Scenarios whose ranks use GPUs 0..ngpus-1 only (one "node" is this host).
for s in pair tp2to4 tp4to2
do
	test_expect_success GPUS "nccl: migrate $s" "
		np=\$(\"\$FIXTURE\" migration $s $s.json 100) &&
		if test \$np -le $ngpus; then
			mkdir $s.d && \"\$FIXTURE\" init $s.json $s.d &&
			mpi \$np --migration $s.json --state-dir $s.d \
				--transport nccl >$s.out &&
			grep \"over nccl\" $s.out &&
			\"\$FIXTURE\" verify $s.json $s.d >$s.verify &&
			! grep -v \" ok\$\" $s.verify
		fi
	"
done

test_done
