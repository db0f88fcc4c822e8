#!/bin/sh
test_description='arachne.so: Slurm sees only the plugin_* and slurm_spank_* symbols'
. "$(dirname "$0")/lib.sh"

# The plugin runs inside sbatch, srun and slurmstepd: any other symbol it
# exported could stand in for one of theirs (spank/arachne.lds).
plugin="$top_builddir/spank/.libs/arachne.so"
if ! test -f "$plugin"; then
	skip_all="arachne.so was not built (configure found no slurm/spank.h)"
	test_done
fi
if ! command -v nm >/dev/null; then
	skip_all="nm is not installed (Debian: binutils)"
	test_done
fi

test_expect_success 'nm -D lists the symbols arachne.so defines' '
	nm -D --defined-only "$plugin" | awk "{ print \$NF }" | sort >exports &&
	cat exports &&
	test -s exports
'

test_expect_success 'each is plugin_* or slurm_spank_*' '
	grep -v "^plugin_\|^slurm_spank_" exports >others || true &&
	test_must_be_empty others
'

test_expect_success 'Slurm finds what it looks up' '
	for sym in plugin_name plugin_type plugin_version slurm_spank_init \
		   slurm_spank_init_post_opt slurm_spank_exit; do
		grep -qx "$sym" exports || { echo "missing $sym" >&2; return 1; }
	done
'

test_done
