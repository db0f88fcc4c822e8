#!/bin/bash
# slurm-cluster.sh - a throw-away Slurm cluster on this host for the
# end-to-end tests of arachne.so: munged, slurmctld and one slurmd per
# node (Debian's slurmd runs several nodes on one host with `slurmd -N`),
# each node with typed fake GPUs whose device files are links to
# /dev/null.  By default
#
#   node1 gpu:a100:4    node2 gpu:h100:4    node3 gpu:a6000:1
#
# and SLURM_CLUSTER_NODES="node1:h100:2 node2:a100:2 ..." gives others.
#
#   slurm-cluster.sh start DIR PORT [PLUGSTACK-LINE]
#   slurm-cluster.sh stop DIR
#
# start writes the configuration under DIR (which must be short: Unix
# socket paths live there), starts the daemons and waits, bounded, until
# all nodes are idle; DIR/env.sh then sets SLURM_CONF.  It exits 77 when
# Slurm or munge is not installed and 1 when the cluster does not come up
# (see DIR/log).  stop cancels the jobs and stops exactly the daemons that
# start recorded in pid files.  Must run as root.
set -u

MODE=${1:-}
DIR=${2:-}
NODES=() GPUTYPE=() GPUCNT=()
# stop stops what start started, whatever the environment says now.
if [ "$MODE" = stop ] && [ -s "$DIR/nodes" ]; then
	SLURM_CLUSTER_NODES=$(cat "$DIR/nodes")
fi
for spec in ${SLURM_CLUSTER_NODES:-node1:a100:4 node2:h100:4 node3:a6000:1}; do
	IFS=: read -r n t c <<-SPEC
	$spec
	SPEC
	NODES+=("$n") GPUTYPE+=("$t") GPUCNT+=("$c")
done

log() { printf 'slurm-cluster: %s\n' "$*" >&2; }
die() { log "$*"; exit "${EXIT:-1}"; }
# first_error LOG: the first error a daemon logged (usually the cause),
# for a message that outlives LOG: the tests remove DIR when they end.
first_error() {
	local e
	e=$(grep -h -i -m 1 -E 'error:|fatal:' "$1" 2>/dev/null | sed 's/^\[[^]]*\] //')
	printf '%s (%s)' "${e:-no error logged}" "$1"
}

[ -n "$DIR" ] || die "usage: $0 start|stop DIR [PORT [PLUGSTACK-LINE]]"

pid_alive() {	# pidfile comm
	local p
	[ -s "$1" ] || return 1
	p=$(cat "$1" 2>/dev/null)
	[ -n "$p" ] && grep -q "^$2" "/proc/$p/comm" 2>/dev/null
}

stop_pidfiles() {	# pidfile:comm ... -> TERM, wait up to 5 s, KILL
	local spec f c p i alive pids=()
	for spec in "$@"; do
		f=${spec%%:*} c=${spec##*:}
		if pid_alive "$f" "$c"; then
			p=$(cat "$f")
			kill -TERM "$p" 2>/dev/null && pids+=("$p")
		fi
		rm -f "$f"
	done
	for i in $(seq 1 50); do
		alive=0
		for p in "${pids[@]}"; do [ -d "/proc/$p" ] && alive=1; done
		[ "$alive" = 0 ] && return 0
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	return 0
}

do_stop() {
	local n specs=()
	[ -d "$DIR" ] || return 0
	export SLURM_CONF="$DIR/etc/slurm.conf"
	if pid_alive "$DIR/run/slurmctld.pid" slurmctld; then
		timeout 5 scancel --quiet --full 2>/dev/null
		for i in $(seq 1 50); do
			[ -z "$(timeout 5 squeue -h -t R,CG,PD -o %i 2>/dev/null)" ] && break
			sleep 0.1
		done
	fi
	for n in "${NODES[@]}"; do specs+=("$DIR/run/slurmd-$n.pid:slurmd"); done
	stop_pidfiles "${specs[@]}"
	stop_pidfiles "$DIR/run/slurmctld.pid:slurmctld" \
		"$DIR/munge/munged.pid:munged"
}

do_start() {
	local port=${3:-6817} plugstack=${4:-} host i n last g idle
	[ "$(id -u)" = 0 ] || { EXIT=77 die "not root"; }
	for p in munged mungekey slurmctld slurmd sbatch; do
		command -v "$p" >/dev/null || { EXIT=77 die "$p is not installed (Debian: slurmctld slurmd slurm-client munge)"; }
	done
	host=$(hostname -s)
	rm -rf "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"
	mkdir -p "$DIR"/{etc,log,run,state,spool,dev,munge/key,munge/run} || die "cannot create $DIR"
	chmod 755 "$DIR" "$DIR/etc" "$DIR/munge" "$DIR/munge/run"
	chmod 700 "$DIR/munge/key"
	[ -s "$DIR/munge/key/munge.key" ] ||
		mungekey -c -b 1024 -k "$DIR/munge/key/munge.key" || die "mungekey failed"

	cat > "$DIR/etc/slurm.conf" <<CONF
ClusterName=arachnetest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/run/munge.sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=sched_interval=1
MailProg=/bin/true
SlurmdTimeout=60
MinJobAge=300
KillWait=2
CONF
	for i in "${!NODES[@]}"; do
		echo "NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1 + i)) CPUs=8 RealMemory=4000 Gres=gpu:${GPUTYPE[$i]}:${GPUCNT[$i]} State=UNKNOWN"
	done >> "$DIR/etc/slurm.conf"
	echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$DIR/etc/slurm.conf"

	# gres/gpu needs device files; links to /dev/null stand in for GPUs.
	echo "AutoDetect=off" > "$DIR/etc/gres.conf"
	for i in "${!NODES[@]}"; do
		n=${NODES[$i]}
		mkdir -p "$DIR/dev/$n"
		last=$((GPUCNT[i] - 1))
		for g in $(seq 0 $last); do ln -sfn /dev/null "$DIR/dev/$n/nvidia$g"; done
		echo "NodeName=$n Name=gpu Type=${GPUTYPE[$i]} File=$DIR/dev/$n/nvidia[0-$last]"
	done >> "$DIR/etc/gres.conf"
	printf '%s\n' "$plugstack" > "$DIR/etc/plugstack.conf"
	for i in "${!NODES[@]}"; do
		printf '%s:%s:%s ' "${NODES[$i]}" "${GPUTYPE[$i]}" "${GPUCNT[$i]}"
	done > "$DIR/nodes"
	echo "export SLURM_CONF=$DIR/etc/slurm.conf" > "$DIR/env.sh"
	chmod 644 "$DIR"/etc/* "$DIR/env.sh"
	export SLURM_CONF="$DIR/etc/slurm.conf"

	munged --socket="$DIR/munge/run/munge.sock" \
		--key-file="$DIR/munge/key/munge.key" \
		--pid-file="$DIR/munge/munged.pid" \
		--seed-file="$DIR/munge/key/munged.seed" \
		--log-file="$DIR/log/munged.log" || die "munged failed: $(first_error "$DIR/log/munged.log")"
	slurmctld -c -i -f "$SLURM_CONF" || die "slurmctld failed: $(first_error "$DIR/log/slurmctld.log")"
	for i in $(seq 1 51); do
		timeout 5 scontrol ping 2>/dev/null | grep -q UP && break
		[ "$i" -lt 51 ] || die "timed out after 10 s waiting for slurmctld to answer scontrol ping: $(first_error "$DIR/log/slurmctld.log")"
		sleep 0.2
	done
	for n in "${NODES[@]}"; do
		mkdir -p "$DIR/spool/$n"
		slurmd -N "$n" -f "$SLURM_CONF" || die "slurmd $n failed: $(first_error "$DIR/log/slurmd-$n.log")"
	done
	for i in $(seq 1 100); do
		idle=$(timeout 5 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
		[ "$idle" -ge "${#NODES[@]}" ] && return 0
		sleep 0.2
	done
	die "timed out after 20 s waiting for ${#NODES[@]} idle nodes: $idle are (see $DIR/log)"
}

case $MODE in
start) shift 2; do_start "$DIR" "" "$@" ;;
stop) do_stop ;;
*) die "unknown command '$MODE'" ;;
esac
