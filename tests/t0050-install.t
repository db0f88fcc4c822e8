#!/bin/sh
test_description='installed as a site installs it: the plugin where Slurm looks, the examples, configs that match the prefix

make install into a private DESTDIR: arachne-launch (which every example
calls) and the examples are installed, the example configs name the paths
of this installation, and the plugin goes where the installed Slurm keeps
its plugins.  The example scripts use only options the programs have,
arachne-launch gives a dense model no expert option, and every configure
option says what it does.'
. "$(dirname "$0")/lib.sh"

EXAMPLES="$top_srcdir/slurm-examples"
# libtool installs into no path with a space (the trash directory has one).
ROOT=$AR_SOCK_DIR/root

test_expect_success 'the example scripts use only options arachne-migrate and arachnectl have' '
	"$top_builddir/migrate/arachne-migrate" --help >migrate.help &&
	"$top_builddir/plannerd/arachnectl" --help >ctl.help &&
	for prog in arachne-migrate arachnectl; do
		help=$(test $prog = arachnectl && echo ctl.help || echo migrate.help)
		sed -n "s/.*\\<$prog\\>\\(.*\\)/\\1/p" "$EXAMPLES"/*.sbatch |
			grep -o -- "--[a-z][a-z-]*" | sort -u >$prog.used
		test -s $prog.used || return 1
		for opt in $(cat $prog.used); do
			grep -q -- "$opt\\>" $help || {
				echo "$prog has no option $opt (used in slurm-examples)"
				return 1
			}
		done
	done &&
	cat arachne-migrate.used arachnectl.used
'

# site_plannerd: the installed plannerd with site.conf, answering ping,
# then stopped (every wait bounded).
site_plannerd() {
	plannerd=$(find "$ROOT" -path "*/sbin/plannerd") || return 1
	"$plannerd" -F -f "$PWD/site.conf" >site.log 2>&1 </dev/null &
	pid=$!
	ar_wait_until 100 "the installed plannerd to serve" \
		test -S "$AR_SOCK_DIR/pd.sock" || { cat site.log; return 1; }
	"$(find "$ROOT" -path "*/bin/arachnectl")" -s "$AR_SOCK_DIR/pd.sock" ping >ping.out
	rc=$?
	kill "$pid" && wait "$pid" || rc=1
	cat site.log
	return $rc
}

# launch TP EP ETP: arachne-launch'"'"'s Megatron arguments for a stage of
# that layout (dry run).
launch() {
	cat >plan.json <<-EOF
	{"micro_batch": 1, "global_batch": 8, "seq_len": 128,
	 "templates": [{"replicas": 1, "micro_batches": 8,
	   "stages": [{"tp": $1, "layers": [0, 3], "ep": $2, "etp": $3}],
	   "placement": [[{"node": "node1", "gpus": [0]}]]}]}
	EOF
	env ARACHNE_ROLE=worker ARACHNE_PLAN="$PWD/plan.json" ARACHNE_TEMPLATE=0 \
		ARACHNE_STAGE=0 ARACHNE_LAYERS=0-3 ARACHNE_RDZV_ADDR=node1:29500 \
		ARACHNE_PIPELINE=0 \
		ARACHNE_LOCAL_GPU=0 ARACHNE_TP_RANK=0 ARACHNE_TP_SIZE=$1 \
		ARACHNE_PP_SIZE=1 ARACHNE_DP_RANK=0 ARACHNE_DP_SIZE=1 \
		ARACHNE_EP=$2 ARACHNE_ETP=$3 ARACHNE_LAUNCH_DRY_RUN=1 \
		python3 "$EXAMPLES/arachne-launch" train.py | tail -n 1
}

test_expect_success 'arachne-launch: no expert option for a dense model (ETP = TP)' '
	launch 4 1 4 >dense.out &&
	cat dense.out &&
	grep -- "--tensor-model-parallel-size 4" dense.out &&
	! grep -- "--expert" dense.out
'

test_expect_success 'arachne-launch: expert options where the plan has them' '
	launch 2 4 1 >moe.out &&
	cat moe.out &&
	grep -- "--expert-model-parallel-size 4" moe.out &&
	grep -- "--expert-tensor-parallel-size 1" moe.out
'

test_expect_success 'every configure option says what it does' '
	"$top_srcdir/configure" --help >configure.help &&
	cat "$top_srcdir/configure.ac" "$top_srcdir"/m4/ar_*.m4 |
		sed -n "s/.*AC_ARG_\\(WITH\\|ENABLE\\)(\\[\\([a-z-]*\\)\\].*/\\1 \\2/p" |
		sort -u >options &&
	test -s options &&
	while read kind name; do
		opt=--$(test $kind = WITH && echo with || echo enable)-$name
		test $kind = ENABLE && grep -q -- "--disable-$name" configure.help &&
			opt=--disable-$name
		# The option, then text on its line or the next.
		awk -v o="$opt" "index(\$1, o) == 1 { n = NF > 1 ? 1 : 2; next }
			n == 2 { if (NF) ok = 1; n = 0 } n == 1 { ok = 1; n = 0 }
			END { exit !ok }" configure.help || {
			echo "configure: $opt has no help text"
			return 1
		}
	done <options
'

# Not the make that runs this test: its flags (-j, TESTS=...) are not ours.
# The build tree itself, even when this test runs from a tree of links
# to it (t0900).
test_expect_success 'make install into a DESTDIR' '
	builddir=$(dirname "$(readlink -f "$top_builddir/Makefile")") &&
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES \
		make -s -C "$builddir" install DESTDIR="$ROOT" >install.log 2>&1 ||
	{ cat install.log; false; }
'

test_expect_success 'no installed file keeps an @VAR@ placeholder' '
	find "$ROOT" -path "*/man/man[158]/*" >pages &&
	test "$(wc -l <pages)" -ge 9 &&
	{ grep -rlI "@[A-Z_][A-Z_]*@" "$ROOT" >placeholders; test $? -le 1; } &&
	test_must_be_empty placeholders
'

test_expect_success 'the reference plannerd.conf and the site example are both installed' '
	grep -q "Every setting is optional" "$(find "$ROOT" -path "*/doc/arachne/plannerd.conf")" &&
	grep -q "three GPU types" "$(find "$ROOT" -path "*/doc/arachne/examples/plannerd.conf")"
'

test_expect_success 'arachne-launch and the examples are installed' '
	launch=$(find "$ROOT" -path "*/bin/arachne-launch") &&
	test -x "$launch" &&
	for f in train-plain.sbatch train-hetjob.sbatch train-elastic.sbatch \
		join-gpus.sbatch plannerd.conf arachne.conf; do
		test -f "$(find "$ROOT" -path "*/doc/arachne/examples/$f")" || {
			echo "$f is not installed"
			return 1
		}
	done
'

test_expect_success 'the example plannerd.conf names the installed profiles, and plannerd takes it' '
	conf=$(find "$ROOT" -path "*/doc/arachne/examples/plannerd.conf") &&
	! grep "@[A-Z_]*@" "$conf" &&
	python3 -c "import re, sys
root, conf, sock = sys.argv[1:]
text = open(conf).read()
profiles = re.search(r\"^profiles_dir = \\\"(.*)\\\";\", text, re.M).group(1)
print(profiles, file=open(\"profiles.path\", \"w\"))
text = text.replace(\"profiles_dir = \\\"\", \"profiles_dir = \\\"\" + root)
text = re.sub(r\"^state_dir = .*\", \"state_dir = \\\"%s/state\\\";\" % root, text, flags=re.M)
text = re.sub(r\"^socket_path = .*\", \"socket_path = \\\"%s\\\";\" % sock, text, flags=re.M)
text = re.sub(r\"^slurm_user = .*\", \"slurm_user = \\\"root\\\";\", text, flags=re.M)
open(\"site.conf\", \"w\").write(text)" "$ROOT" "$conf" "$AR_SOCK_DIR/pd.sock" &&
	test -d "$ROOT$(cat profiles.path)/gpus" &&
	plannerd=$(find "$ROOT" -path "*/sbin/plannerd") &&
	"$plannerd" -f "$PWD/site.conf" --show-config >shown.conf &&
	grep "^profiles_dir = \"$ROOT$(cat profiles.path)\";" shown.conf &&
	site_plannerd &&
	grep "is alive" ping.out
'

test_expect_success 'the installed man pages have every placeholder filled in' '
	find "$ROOT" -path "*/share/man/man*/*" -type f >manpages &&
	test "$(wc -l <manpages)" -ge 5 &&
	! xargs grep -l "@[A-Z_]*@" <manpages &&
	grep "^\.TH ARACHNECTL 1 \"[0-9-]*\" \"arachne [0-9]" \
		"$(grep "/arachnectl\.1$" manpages)" &&
	grep "^\.TH ARACHNE-LAUNCH 1 " "$(grep "/arachne-launch\.1$" manpages)"
'

test_expect_success 'every installed program has its man page' '
	find "$ROOT" -path "*/bin/*" -type f >programs &&
	test "$(wc -l <programs)" -ge 7 &&
	while read -r program; do
		name=${program##*/} &&
		grep -q "/man[18]/$name\.[18]$" manpages || {
			echo "$name has no man page"
			return 1
		}
	done <programs
'

test_expect_success 'every program answers --help and --version (the launcher --help)' '
	version=$(sed -n "s/^#define PACKAGE_VERSION \"\(.*\)\"$/\1/p" \
		"$top_builddir/config.h") &&
	test -n "$version" &&
	while read -r program; do
		name=${program##*/} &&
		built= &&
		for dir in policy costmodel migrate plannerd slurm-examples \
			slurm-examples/gpt; do
			for top in "$top_builddir" "$top_srcdir"; do
				test -n "$built" || ! test -x "$top/$dir/$name" ||
					built=$top/$dir/$name
			done
		done &&
		test -n "$built" &&
		"$built" --help >help.out &&
		test -s help.out &&
		if test "$name" = arachne-launch; then continue; fi &&
		"$built" --version >version.out &&
		grep "^$name .*$version$" version.out || {
			echo "$name: --help or --version"
			return 1
		}
	done <programs
'

test_expect_success 'the example plugstack line names the plugin where it was installed' '
	line=$(grep "^required " "$(find "$ROOT" -path "*/doc/arachne/examples/arachne.conf")") &&
	echo "$line" &&
	plugin=$(echo "$line" | cut -d" " -f2) &&
	case $plugin in /*/arachne.so) ;; *) false ;; esac &&
	if test -f "$top_builddir/spank/.libs/arachne.so"; then
		test -f "$ROOT$plugin"
	fi
'

# Where the installed Slurm keeps its plugins, found apart from configure:
# the directory of the libslurmfull that sbatch loads, where Debian keeps
# the plugins too.  Only for a build that left the choice to configure.
slurm_plugins=
if test -f "$top_builddir/spank/.libs/arachne.so" &&
   ! "$top_builddir/config.status" --config | grep -q -- --with-slurm-plugindir &&
   sbatch=$(which sbatch); then
	# which: sharness.d/slurm.sh wraps sbatch in a function.
	slurm_plugins=$(ldd "$sbatch" 2>/dev/null |
		sed -n "s|.*=> \\(/.*\\)/libslurmfull\\.so .*|\\1|p")
	ls "$slurm_plugins" 2>/dev/null | grep -q "^auth_munge.so$" &&
		test_set_prereq SLURM_PLUGINS
fi

test_expect_success SLURM_PLUGINS 'the plugin goes where the installed Slurm keeps its own plugins' '
	dir=$(sed -n "s/^SLURM_PLUGINDIR = //p" "$top_builddir/spank/Makefile") &&
	echo "configure: $dir; sbatch loads its plugins from $slurm_plugins" &&
	test "$dir" = "$slurm_plugins" &&
	test -f "$ROOT$dir/arachne.so"
'

test_done
