# lib.sh - sourced first by every system test: finds sharness, or skips.
if [ -z "${SHARNESS_SH:-}" ] || [ ! -r "$SHARNESS_SH" ]; then
	echo "1..0 # SKIP sharness.sh not found (Debian: sharness)"
	exit 0
fi
. "$SHARNESS_SH"
