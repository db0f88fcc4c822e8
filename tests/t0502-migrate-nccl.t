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
