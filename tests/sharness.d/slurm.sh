# slurm.sh - sourced by sharness for every test; the t07xx tests call
# slurm_setup to run arachne.so on a real Slurm cluster of their own
# (tests/slurm-cluster.sh) and slurm_plannerd_start to start the real
# plannerd.  Every name here starts with slurm_ or SLURM_: sharness.d/
# files share one namespace.

# A bound on every plannerd exchange of the plugin in these tests.
SLURM_TIMEOUT_MS=1000

# Every sbatch and srun a test runs ends within SLURM_WAIT_S seconds: it is
# killed then, with a message naming it (the steps inside a job script are
# bounded by the sbatch --wait that runs the job).
SLURM_WAIT_S=300
sbatch() {
	ar_bounded "$SLURM_WAIT_S" "sbatch $*" sbatch "$@"
}
srun() {
	ar_bounded "$SLURM_WAIT_S" "srun $*" srun "$@"
}

# slurm_setup PORT [per-node]: start munged, slurmctld and the slurmd of
# the nodes (three, or $SLURM_CLUSTER_NODES) with arachne.so in their
# plugstack.conf, or skip the whole test file with the reason.  With
# per-node, the plugin asks the plannerd of its own node
# (socket=.../pd-%n.sock, slurm_plannerd_start_all).
# Two build trees on one host may run their Slurm tests at once: each tree
# shifts PORT by a multiple of 40 taken from its path (or by
# AR_SLURM_PORT_OFFSET when set), so their daemons do not collide.
slurm_setup() {
	port=$(( $1 + ${AR_SLURM_PORT_OFFSET:-$(( $(printf '%s' "$top_builddir" | cksum | cut -d' ' -f1) % 100 * 40 ))} ))
	if test "$(id -u)" != 0; then
		skip_all="the Slurm tests start slurmctld and slurmd, which needs root"
		test_done
	fi
	for p in munged mungekey slurmctld slurmd sbatch python3; do
		if ! command -v $p >/dev/null 2>&1; then
			skip_all="$p is not installed (Debian: slurmctld slurmd slurm-client munge python3)"
			test_done
		fi
	done
	if ! test -f "$top_builddir/spank/.libs/arachne.so"; then
		skip_all="arachne.so was not built (configure found no slurm/spank.h)"
		test_done
	fi
	if nm -D "$top_builddir/spank/.libs/arachne.so" 2>/dev/null |
	   grep -q "__asan_init\|__ubsan_handle"; then
		skip_all="arachne.so is built with sanitizers, which sbatch and slurmstepd cannot load"
		test_done
	fi
	# The job environment must not inherit the test's own ARACHNE_*.
	for v in $(env | sed -n 's/^\(ARACHNE_[A-Z_]*\)=.*/\1/p'); do
		unset "$v"
	done
	SLURM_DIR=$(mktemp -d /tmp/arachne-slurm.XXXXXX) || exit 1
	chmod 755 "$SLURM_DIR"
	SLURM_PLAN_DIR=$SLURM_DIR/plans
	mkdir -m 1777 "$SLURM_PLAN_DIR" "$SLURM_DIR/work"
	SLURM_PLANNERD_SOCK=$SLURM_DIR/plannerd.sock
	SLURM_SOCKET_ARG=$SLURM_PLANNERD_SOCK
	test "${2:-}" = per-node && SLURM_SOCKET_ARG=$SLURM_DIR/pd-%n.sock
	# A copy: a rebuild during the run must not swap the loaded plugin.
	cp "$top_builddir/spank/.libs/arachne.so" "$SLURM_DIR/arachne.so"
	chmod 755 "$SLURM_DIR/arachne.so"
	ar_at_exit slurm_teardown
	SLURM_PORT=$port
	SLURM_PLUGSTACK="required $SLURM_DIR/arachne.so socket=$SLURM_SOCKET_ARG timeout_ms=$SLURM_TIMEOUT_MS plan_dir=$SLURM_PLAN_DIR"
	if ! "$top_srcdir/tests/slurm-cluster.sh" start "$SLURM_DIR" "$port" \
	     "$SLURM_PLUGSTACK" 2>slurm-start.log; then
		skip_all="the Slurm cluster did not start: $(tail -n 1 slurm-start.log)"
		test_done
	fi
	. "$SLURM_DIR/env.sh"
	export SLURM_CONF
	if test -x "$top_builddir/plannerd/plannerd"; then
		test_set_prereq PLANNERD
	else
		say "plannerd/plannerd is not built: tests that need plannerd are skipped"
	fi
}

slurm_teardown() {
	test -n "${SLURM_DIR:-}" || return 0
	slurm_plannerd_stop
	for f in "$SLURM_DIR"/pd/*/pid; do
		test -s "$f" && kill -KILL "$(cat "$f")" 2>/dev/null
	done
	"$top_srcdir/tests/slurm-cluster.sh" stop "$SLURM_DIR" 2>/dev/null
	# Keep the logs for a failed run; the rest goes.
	if test -n "${debug:-}"; then
		echo "# cluster left in $SLURM_DIR" >&2
	else
		rm -rf "$SLURM_DIR"
	fi
	SLURM_DIR=
}

# slurm_plannerd_start: the real plannerd on $SLURM_PLANNERD_SOCK, with
# the site map of slurm-cluster.sh's GRES types (or $SLURM_GRES_MAP, the
# entries of a gres_map list); waits (bounded) until its socket is there.
slurm_plannerd_start() {
	gres_map='{ gres = "a100"; gpu = "a100-40"; },
	  { gres = "h100"; gpu = "h100"; },
	  { gres = "a6000"; gpu = "a6000"; }'
	cat >"$SLURM_DIR/plannerd.conf" <<-CONF
	socket_path = "$SLURM_PLANNERD_SOCK";
	state_dir = "$SLURM_DIR/plannerd-state";
	profiles_dir = "${AR_PROFILES:-$top_srcdir/profiles}";
	slurm_user = "root";
	planner = "exhaustive";
	budget_s = 20.0;
	# Any gain is worth a move here, so a changed allocation always
	# gets a new plan rather than the old one kept.
	replan_horizon_s = 1.0e7;
	gres_map = ( ${SLURM_GRES_MAP:-$gres_map} );
	CONF
	mkdir -p "$SLURM_DIR/plannerd-state"
	"$top_builddir/plannerd/plannerd" -F -f "$SLURM_DIR/plannerd.conf" \
		>>"$SLURM_DIR/plannerd.log" 2>&1 &
	echo $! >"$SLURM_DIR/plannerd.pid"
	for i in $(seq 1 100); do
		test -S "$SLURM_PLANNERD_SOCK" && return 0
		if ! kill -0 "$(cat "$SLURM_DIR/plannerd.pid")" 2>/dev/null; then
			cat "$SLURM_DIR/plannerd.log" >&2
			echo "plannerd exited before it made $SLURM_PLANNERD_SOCK" >&2
			return 1
		fi
		sleep 0.1
	done
	cat "$SLURM_DIR/plannerd.log" >&2
	echo "timed out after 10 s waiting for plannerd to make $SLURM_PLANNERD_SOCK" >&2
	return 1
}

slurm_plannerd_stop() {
	test -s "$SLURM_DIR/plannerd.pid" || return 0
	pid=$(cat "$SLURM_DIR/plannerd.pid")
	kill -CONT "$pid" 2>/dev/null
	kill -TERM "$pid" 2>/dev/null
	for i in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	rm -f "$SLURM_DIR/plannerd.pid"
}

# slurm_job_state JOBID: COMPLETED, FAILED, ... (jobs stay known for
# MinJobAge); a job still COMPLETING (its epilog runs, which tells plannerd
# to forget it) is waited for, at most 10 s.
slurm_job_state() {
	for i in $(seq 1 100); do
		st=$(scontrol show job "$1" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1)
		test "$st" != COMPLETING && break
		sleep 0.1
	done
	test "$st" != COMPLETING ||
		echo "job $1 still COMPLETING after 10 s (its epilog did not end)" >&2
	echo "$st"
}

# slurm_wait_for FILE [TENTHS]: until FILE exists, at most TENTHS/10 s (300).
slurm_wait_for() {
	ar_wait_until "${2:-300}" "$1" test -e "$1"
}

# slurm_job_gone JOBID: true when the job is not pending, running or
# completing any more.
slurm_job_gone() {
	test -z "$(squeue -h -j "$1" -t PD,R,CG -o %i 2>/dev/null)"
}

# slurm_wait_gone JOBID: until the job left squeue's running/pending lists,
# at most 30 s.
slurm_wait_gone() {
	ar_wait_until 300 "job $1 to end" slurm_job_gone "$1"
}

# slurm_job_running JOBID: true when the job runs.
slurm_job_running() {
	test "$(slurm_job_state "$1")" = RUNNING
}

# slurm_plannerd_start_all PROFILES: one plannerd per node of the cluster,
# each on $SLURM_DIR/pd-NODE.sock with its own state, the toy profiles in
# PROFILES (plannerd_profiles) and the GRES types mapped onto them (h100:
# fast, the others: slow).  Waits, bounded, for every socket.
slurm_plannerd_start_all() {
	for n in $(sed "s/:[^ ]*//g" "$SLURM_DIR/nodes"); do
		mkdir -p "$SLURM_DIR/pd/$n" || return 1
		cat >"$SLURM_DIR/pd/$n/plannerd.conf" <<-CONF
		socket_path = "$SLURM_DIR/pd-$n.sock";
		state_dir = "$SLURM_DIR/pd/$n/state";
		profiles_dir = "$1";
		slurm_user = "root";
		planner = "exhaustive";
		budget_s = 20.0;
		replan_horizon_s = 1.0e7;
		gres_map = (
		  { gres = "h100"; gpu = "fast"; },
		  { gres = "a100"; gpu = "slow"; },
		  { gres = "a6000"; gpu = "slow"; }
		);
		CONF
		"$top_builddir/plannerd/plannerd" -F -f "$SLURM_DIR/pd/$n/plannerd.conf" \
			>>"$SLURM_DIR/pd/$n/log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- &
		echo $! >"$SLURM_DIR/pd/$n/pid"
	done
	for n in $(sed "s/:[^ ]*//g" "$SLURM_DIR/nodes"); do
		slurm_wait_for "$SLURM_DIR/pd-$n.sock" 100 || {
			cat "$SLURM_DIR/pd/$n/log" >&2
			return 1
		}
	done
}
