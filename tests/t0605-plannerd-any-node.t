#!/bin/sh
test_description='plannerd: any daemon answers a replan, the cache ignores names, the log says what happened

With one plannerd per node, the replan of a running job may reach a daemon
that never planned it.  The job'"'"'s plan directory is the truth: the replan
carries the plan the job runs now and its composition, and a daemon that
never saw the job answers it like the one that made the first plan.'
. "$(dirname "$0")/lib.sh"

field() {
	python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].strip(".").split("."):
	v = v[int(k)] if isinstance(v, list) else v[k]
print(json.dumps(v, sort_keys=True) if isinstance(v, (dict, list, bool)) else v)' "$1" "$2"
}

# Two daemons on one machine, as on two nodes: "a" in a/, "b" in b/, their
# sockets a.sock and b.sock in the short socket directory.
daemon() {
	mkdir -p "$1" &&
	cd "$1" &&
	PLANNERD_SOCK=$AR_SOCK_DIR/$1.sock &&
	plannerd_config plannerd.conf "replan_horizon_s = 1.0e7;" &&
	ln -sfn ../profiles profiles &&
	plannerd_start &&
	cd ..
}
ctl_on() {
	d=$1
	shift
	"$ARACHNECTL" -s "$AR_SOCK_DIR/$d.sock" -t 60 "$@"
}

test_expect_success 'setup: toy profiles, two compositions, two daemons' '
	plannerd_profiles profiles &&
	cat >small.json <<-EOF &&
	{"name":"slurm-job-7","nodes":[{"gpu":"fast","gpus_per_node":2,"hosts":"gpu101"},
	 {"gpu":"slow","gpus_per_node":2,"hosts":"gpu102"}]}
	EOF
	cat >grown.json <<-EOF &&
	{"name":"slurm-job-7","nodes":[{"gpu":"fast","gpus_per_node":2,"hosts":"gpu101"},
	 {"gpu":"slow","gpus_per_node":2,"hosts":"gpu102"},
	 {"gpu":"fast","gpus_per_node":2,"hosts":"gpu110"}]}
	EOF
	daemon a && daemon b
'

test_expect_success 'daemon a plans job 7' '
	ctl_on a --json plan 7 --model toy --global-batch 16 --cluster small.json >plan.json &&
	test "$(field plan.json .ok)" = true
'

test_expect_success 'daemon b never saw job 7: a bare replan says what to send' '
	python3 -c "import json
print(json.dumps({\"op\": \"replan\", \"job\": \"7\", \"cluster\": json.load(open(\"grown.json\"))}))" >bare.req &&
	ctl_on b raw <bare.req >bare.out &&
	test "$(field bare.out .ok)" = false &&
	test "$(field bare.out .error.code)" = not_found &&
	grep "send the plan the job runs now as \\\\\"previous\\\\\"" bare.out
'

test_expect_success 'a replan carrying the previous plan is answered by daemon b as by daemon a' '
	python3 -c "import json
plan = json.load(open(\"plan.json\"))[\"plan\"]
req = {\"op\": \"replan\", \"job\": \"7\", \"cluster\": json.load(open(\"grown.json\")),
       \"previous\": {\"plan\": plan, \"cluster\": json.load(open(\"small.json\"))}}
print(json.dumps(req))" >full.req &&
	ctl_on b raw <full.req >b.out &&
	ctl_on a raw <full.req >a.out &&
	test "$(field b.out .ok)" = true &&
	test "$(field b.out .kept)" = false &&
	test "$(field b.out .plan.templates)" = "$(field a.out .plan.templates)" &&
	test "$(field b.out .migration.tuples)" = "$(field a.out .migration.tuples)" &&
	test "$(field b.out .plan.global_batch)" = 16 &&
	test "$(field b.out .plan.model)" = toy &&
	test -f b/state/jobs/7.json
'

test_expect_success 'the previous plan wins over a stale stored one' '
	# Daemon a stored the grown plan; job 7 shrank back meanwhile on
	# another node.  The request says so: a must plan from small, not
	# from what it stored.
	python3 -c "import json
grown = json.load(open(\"a.out\"))[\"plan\"]
req = {\"op\": \"replan\", \"job\": \"7\", \"cluster\": json.load(open(\"small.json\")),
       \"previous\": {\"plan\": grown, \"cluster\": json.load(open(\"grown.json\"))}}
print(json.dumps(req))" >back.req &&
	ctl_on a raw <back.req >back.out &&
	test "$(field back.out .ok)" = true &&
	python3 -c "import json
m = json.load(open(\"back.out\"))[\"migration\"]
nodes = [n[\"name\"] for n in m[\"nodes\"]]
assert \"gpu110\" in nodes, nodes   # the old plan held state there
assert any(r[\"node\"] == nodes.index(\"gpu110\") and r[\"old\"] for r in m[\"ranks\"])"
'

test_expect_success 'a replan with previous for another user is refused to a plain user' '
	# nobody may not enter the build tree (under /root, say): the client
	# is copied beside the socket, which nobody may reach.
	cp "$ARACHNECTL" "$AR_SOCK_DIR/arachnectl" &&
	chmod 755 "$AR_SOCK_DIR" "$AR_SOCK_DIR/arachnectl" &&
	chmod 666 "$AR_SOCK_DIR/b.sock" &&
	python3 -c "import json
r = json.load(open(\"full.req\")); r[\"job\"] = \"8\"; r[\"user\"] = \"root\"
print(json.dumps(r))" >other.req &&
	chmod 644 other.req &&
	runuser -u nobody -- "$AR_SOCK_DIR/arachnectl" -s "$AR_SOCK_DIR/b.sock" -t 60 raw <other.req >other.out &&
	test "$(field other.out .error.code)" = permission
'

test_expect_success 'identical requests under other composition names share one plan' '
	for j in 21 22 23; do
		sed "s/slurm-job-7/slurm-job-$j/" small.json >c$j.json &&
		ctl_on b --json plan $j --model toy --global-batch 32 --cluster c$j.json >p$j.json ||
		return 1
	done &&
	test "$(field p21.json .cached)" = false &&
	test "$(field p22.json .cached)" = true &&
	test "$(field p23.json .cached)" = true &&
	ctl_on b --json status >status.json &&
	test "$(field status.json .plans_made)" = 1
'

test_expect_success 'the log: timestamps, what a replan decided, forgets' '
	ctl_on b forget 21 &&
	grep -E "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12} plannerd: info: job 7: replan answered for uid $(id -u): the job moves to a new plan, .* samples/s, .* s of migration" b/plannerd.log &&
	grep "job 21: forgotten (asked by uid $(id -u))" b/plannerd.log &&
	grep "job 22: plan answered for uid $(id -u) (from the cache)" b/plannerd.log
'

test_done
