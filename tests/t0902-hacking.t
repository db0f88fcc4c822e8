#!/bin/sh
test_description='HACKING.md names every folder, program and library of the tree

Its source code layout must not drift from the tree again: every folder
that holds source, scripts, tests or data is named as `DIR/` (a folder
inside a named one may be named by its last part), and every program,
script and library a Makefile.am builds is named as `NAME` (the plugin
as `NAME.so`).  Module test/ folders are named once, generically.'
. "$(dirname "$0")/lib.sh"

HACKING="$top_srcdir/HACKING.md"

# The folders of the source tree, without what autotools, builds, tests
# and git make in it (the tree may be configured in place, or unpacked by
# make distcheck with its _build and _inst inside).
test_expect_success 'the tree has folders to look for' '
	(cd "$top_srcdir" &&
	 find . -mindepth 1 -maxdepth 3 \
		\( -name .git -o -name .deps -o -name .libs -o -name autom4te.cache \
		   -o -name build-aux -o -name "build-*" -o -name "arachne-*" \
		   -o -name _build -o -name _inst -o -name "trash directory.*" \
		   -o -name test-results -o -name "bench-results*" \
		   -o -path "./profiles/*/*" \) -prune -o \
		-type d ! -name test -print |
	 sed "s|^\./||" | sort) >folders &&
	cat folders &&
	grep -qx "tests/sharness.d" folders &&
	grep -qx "policy/baselines" folders
'

test_expect_success 'HACKING.md names every folder' '
	while read -r d; do
		grep -qF "\`$d/\`" "$HACKING" && continue
		parent=${d%/*}
		test "$parent" != "$d" && grep -qF "\`$parent/\`" "$HACKING" &&
			grep -qF "\`${d##*/}/\`" "$HACKING" && continue
		echo "HACKING.md does not name the folder $d/"
		return 1
	done <folders
'

# PROGRAMS (not check_), SCRIPTS and LTLIBRARIES of every .am file, with
# their continuation lines.
test_expect_success 'the Makefile.am files build programs and libraries' '
	find "$top_srcdir" \( -name "build-*" -o -name "arachne-*" -o -name _build \) \
		-prune -o -name "*.am" -print |
	xargs awk "
		/^(bin|sbin|noinst|EXTRA)_PROGRAMS[ \t]*\\+?=/ ||
		/^(dist_)?bin_SCRIPTS[ \t]*\\+?=/ ||
		/^[a-z]*_LTLIBRARIES[ \t]*\\+?=/ {
			on = 1; so = /^[a-z]*plugin_/; sub(/^[^=]*=/, \"\") }
		on { cont = sub(/\\\\\$/, \"\"); sub(/#.*/, \"\")
		     for (i = 1; i <= NF; i++) {
			if (so) sub(/\\.la\$/, \".so\", \$i)	# the plugin module
			print \$i
		     }
		     on = cont }" |
	sed -e "s|.*/||" -e "s|\\.la\$||" | sort -u >built &&
	cat built &&
	grep -qx arachne-gpt built && grep -qx libarnet built &&
	grep -qx plannerd-load built && grep -qx arachne.so built
'

test_expect_success 'HACKING.md names every program and library' '
	while read -r p; do
		grep -qF "\`$p\`" "$HACKING" || {
			echo "HACKING.md does not name $p"
			return 1
		}
	done <built
'

test_done
