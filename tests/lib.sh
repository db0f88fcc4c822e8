# lib.sh - sourced first by every system test: finds sharness, or skips.
if [ -z "${SHARNESS_SH:-}" ] || [ ! -r "$SHARNESS_SH" ]; then
	echo "1..0 # SKIP sharness.sh not found (Debian: sharness)"
	exit 0
fi
. "$SHARNESS_SH"

# Skip the whole script unless arachne-gpt and mpirun are there; MPIRUN
# names the launcher afterwards.
require_gpt_mpi() {
	: "${MPIRUN:=$(command -v mpirun)}"
	if ! test -x "$ARACHNE_GPT" || ! test -x "$MPIRUN"; then
		skip_all='arachne-gpt or mpirun not built/found (configure --with-mpi)'
		test_done
	fi
}
