#!/bin/sh
test_description='arachne-migrate: the NCCL transport on GPUs

Runs the MPI scenarios again with --transport nccl, every rank on its own
GPU (device = the GPU index of its rank in the migration).  Needs a build
with NCCL and as many GPUs on this machine as the largest scenario has
ranks on one node; skipped with the reason otherwise.'
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
if test "${ngpus:-0}" -lt 2; then
	skip_all="needs 2 GPUs, found ${ngpus:-0} (nvidia-smi -L): NCCL transport not exercised"
	test_done
fi

mpi() {
	np=$1
	shift
	"$MPIRUN" --oversubscribe --allow-run-as-root -np "$np" "$MIGRATE" "$@"
}

# Scenarios whose ranks use GPUs 0..ngpus-1 only (one "node" is this host).
for s in pair tp2to4 tp4to2
do
	test_expect_success "nccl: migrate $s" "
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
