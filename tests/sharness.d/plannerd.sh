# plannerd.sh - helpers for the plannerd system tests (t06xx): toy
# profiles, a private daemon in the trash directory, and its client.
# bench/plannerd-bench.sh sources it too (after arachne.sh), outside
# sharness.
PLANNERD="$top_builddir/plannerd/plannerd"
ARACHNECTL="$top_builddir/plannerd/arachnectl"
PLANNERD_FIXTURES="$top_srcdir/tests/plannerd"
# The daemon's socket: in the short private directory of arachne.sh, never
# in the trash directory, whose path may be too long for a socket.
PLANNERD_SOCK="$AR_SOCK_DIR/plannerd.sock"
export PLANNERD ARACHNECTL PLANNERD_FIXTURES PLANNERD_SOCK

# plannerd_profiles DIR [SHRINK]: a toy model (8 blocks) on two GPU types,
# "fast" and "slow" (3x slower), with analytic layer profiles, small enough
# that the exhaustive planner finishes in milliseconds.  SHRINK divides the
# parameter bytes, so that the model state the migration tests move on
# disk is kilobytes, not gigabytes.
plannerd_profiles() {
	shrink=${2:-1}
	mkdir -p "$1/gpus" "$1/models" "$1/layers/toy"
	for g in fast:80:1000:1 slow:40:300:3; do
		IFS=: read -r name mem tflops slow <<-GPU
		$g
		GPU
		cat >"$1/gpus/$name.ini" <<-INI
		[gpu]
		name = $name
		memory_gib = $mem
		peak_tflops = $tflops
		hbm_GBps = 2000
		intra_node_GBps = 300
		network_gbps = 100
		max_gpus_per_node = 8
		price_per_hour = 1
		INI
		awk -v name="$name" -v slow="$slow" -v shrink="$shrink" 'BEGIN {
			MIB = 1048576
			printf "[profile]\nmodel = toy\ngpu = %s\nsource = analytic\nseq_len = 1024\n\n", name
			for (tp = 1; tp <= 8; tp *= 2) for (b = 1; b <= 16; b *= 2) {
				e(tp, b, "embed", 0.1*b*slow, 0.2*b*slow, 0, 8*MIB*b, 64*MIB/tp/shrink)
				e(tp, b, "head", 0.5*b/tp*slow, 1.0*b/tp*slow, 0, 128*MIB*b/tp, 64*MIB/tp/shrink)
				e(tp, b, "block", 1.0*b/tp*slow, 2.0*b/tp*slow, 0.1*b*(tp-1), 64*MIB*b, 256*MIB/tp/shrink)
				# The attention core: a fifth of the block, so that
				# other sequence lengths can be priced (docs/costmodel.md).
				printf "fwd_attn_ms = %.17g\nbwd_attn_ms = %.17g\n\n", 0.2*b/tp*slow, 0.4*b/tp*slow
			}
		}
		function e(tp, b, type, f, bw, c, act, par) {
			printf "[tp%d.mbs%d.%s]\nfwd_ms = %.17g\nbwd_ms = %.17g\ncomm_ms = %.17g\nact_bytes = %.17g\nparam_bytes = %.17g\n", tp, b, type, f, bw, c, act, par
			if (type != "block")
				printf "\n"
		}' >"$1/layers/toy/$name.ini"
	done
	cat >"$1/models/toy.ini" <<-INI
	[model]
	name = toy
	blocks = 8
	hidden = 1024
	ffn = 4096
	heads = 8
	kv_heads = 8
	head_dim = 128
	vocab = 32000
	[training]
	seq_len = 1024
	global_batch = 64
	grad_bytes_per_param = 2
	optimizer_bytes_per_param = 12
	INI
}

# plannerd_config FILE [EXTRA...]: a config for a daemon in $PWD, with
# each EXTRA line appended.
plannerd_config() {
	f=$1
	shift
	cat >"$f" <<-CONF
	socket_path = "$PLANNERD_SOCK";
	socket_mode = "0666";
	profiles_dir = "$PWD/profiles";
	policies_dir = "$PWD/policies";
	state_dir = "$PWD/state";
	planner = "exhaustive";
	budget_s = 5.0;
	workers = 2;
	log_level = "debug";
	CONF
	for line in "$@"; do
		echo "$line" >>"$f"
	done
}

# plannerd_start [ARGS...]: start a daemon in the foreground (logging to
# plannerd.log) and wait, at most 10 s, until it answers ping.
plannerd_start() {
	"$PLANNERD" -F -f "$PWD/plannerd.conf" \
		--topology "$PLANNERD_FIXTURES/topo-4gpu.xml" "$@" \
		>>plannerd.log 2>&1 &
	echo $! >plannerd.pid
	PLANNERD_PIDS="$PLANNERD_PIDS $!"
	i=0
	while ! "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 2 ping >/dev/null 2>&1; do
		i=$((i + 1))
		if ! kill -0 "$(cat plannerd.pid)" 2>/dev/null; then
			cat plannerd.log >&2
			echo "plannerd exited before it answered ping on $PLANNERD_SOCK" >&2
			return 1
		fi
		if [ $i -gt 100 ]; then
			cat plannerd.log >&2
			echo "timed out after 10 s waiting for plannerd to answer ping on $PLANNERD_SOCK" >&2
			return 1
		fi
		sleep 0.1
	done
}

# No daemon outlives its test, whatever the outcome.
PLANNERD_PIDS=
ar_at_exit 'for p in $PLANNERD_PIDS; do kill -9 "$p" 2>/dev/null; done'

# plannerd_gone PID: true once the process PID has ended (a zombie counts:
# it is waited for next).
plannerd_gone() {
	! test -e "/proc/$1" || test "$(sed 's/.*) //' "/proc/$1/stat" | cut -c1)" = Z
}

# plannerd_stop: SIGTERM, then wait, at most 10 s, for the exit status (0
# expected).
plannerd_stop() {
	pid=$(cat plannerd.pid) &&
	kill -TERM "$pid" &&
	ar_wait_until 100 "plannerd (pid $pid) to exit after SIGTERM" \
		plannerd_gone "$pid" &&
	wait "$pid"
}

# ctl ARGS...: arachnectl on the private socket, waiting 60 s at most
# (its own default is 600).
ctl() {
	"$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 "$@"
}
