#!/bin/sh
test_description='plannerd against hostile local users (issue 16)

Slow-loris clients, one user starving the others, a plan file that cannot
be removed, a stored plan that once divided by zero, and site settings
that used to be accepted and then failed every plan.'
. "$(dirname "$0")/lib.sh"

client() {
	ar_bounded 60 "client.py $1" python3 "$PLANNERD_FIXTURES/client.py" "$PLANNERD_SOCK" "$@"
}

test_expect_success 'setup: a daemon with a one-second client timeout and three slots' '
	plannerd_profiles profiles &&
	plannerd_config plannerd.conf "client_timeout_s = 1.0;" "max_clients = 3;" \
		"slurm_user = \"$(id -un)\";" &&
	plannerd_start
'

# Every partial read used to restart the clock: a byte a second kept a
# client forever, and three of them held every slot.
test_expect_success 'slow-loris clients are cut off within the timeout of their first byte' '
	client loris 3 >out &&
	cat out &&
	printf "other served True\n" >expect &&
	printf "timeout cut on time\n%.0s" 1 2 3 >>expect &&
	test_cmp expect out &&
	grep "request not complete within client_timeout_s" plannerd.log
'

test_expect_success 'setup: two workers, one each for a user at a time' '
	plannerd_stop &&
	plannerd_config plannerd.conf "slurm_user = \"$(id -un)\";" &&
	plannerd_start &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":8,\"count\":64},{\"gpu\":\"slow\",\"gpus_per_node\":8,\"count\":64}]}" >big1.json &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":8,\"count\":63},{\"gpu\":\"slow\",\"gpus_per_node\":8,\"count\":64}]}" >big2.json &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2,\"count\":1}]}" >small.json
'

# plan_in_background JOB USER CLUSTER: a 2 s search; JOB goes into
# ./order when answered, its pid into JOB.pid.
plan_in_background() {
	{
		ctl plan "$1" --user "$2" --model toy --cluster "$3" --budget-s 2 \
			>/dev/null && echo "$1" >>order
	} &
	echo $! >"$1.pid"
}

# Two searches that take their whole 2 s budget, of one user, held both
# workers; the small plan of another user waited behind them.  With a
# per-user share the second search waits instead, and the small plan is
# answered first (an order, not a time, so a loaded machine cannot fail it).
test_expect_success 'one user'"'"'s huge requests cannot starve another'"'"'s small one' '
	: >order &&
	plan_in_background a1 nobody big1.json &&
	plan_in_background a2 nobody big2.json &&
	sleep 0.5 &&
	ctl plan b --model toy --cluster small.json >/dev/null &&
	echo b >>order &&
	wait "$(cat a1.pid)" && wait "$(cat a2.pid)" &&
	cat order &&
	test "$(head -n 1 order)" = b &&
	test $(wc -l <order) = 3
'

test_expect_success 'forget fails, and keeps the job, when its file cannot be removed' '
	ctl plan f1 --model toy --cluster small.json >/dev/null &&
	rm state/jobs/f1.json &&
	mkdir -p state/jobs/f1.json/x &&
	test_expect_code 1 ctl forget f1 2>err &&
	grep "cannot remove" err &&
	ctl show f1 >/dev/null &&
	rm -r state/jobs/f1.json &&
	ctl forget f1 &&
	test_expect_code 1 ctl show f1
'

# A stored plan edited to ep = 0 and no edp, then a replan: the daemon
# died of SIGFPE in the shared plan parser.
test_expect_success 'a replan of a stored plan with ep = 0 is an error, not a crash' '
	ctl plan z --model toy --cluster small.json >/dev/null &&
	plannerd_stop &&
	python3 -c "import json
d = json.load(open(\"state/jobs/z.json\"))
for t in d[\"plan\"][\"templates\"]:
    for st in t[\"stages\"]:
        st[\"ep\"] = 0
        del st[\"edp\"]
json.dump(d, open(\"state/jobs/z.json\", \"w\"))" &&
	plannerd_start &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2,\"count\":2}]}" >grown.json &&
	test_expect_code 1 ctl replan z --cluster grown.json 2>err &&
	grep "\"ep\" must be an integer from 1 to 4096, not 0" err &&
	ctl ping
'

test_expect_success 'a SIGHUP that moves the socket: SIGTERM removes the socket it bound' '
	sed -i "s|^socket_path = .*|socket_path = \"$AR_SOCK_DIR/other.sock\";|" plannerd.conf &&
	kill -HUP "$(cat plannerd.pid)" &&
	ar_wait_until 100 "plannerd to log that it reloaded its configuration" \
		grep -q "configuration reloaded" plannerd.log &&
	ctl ping &&
	plannerd_stop &&
	! test -e "$PLANNERD_SOCK" &&
	! test -e "$AR_SOCK_DIR/other.sock"
'

test_expect_success 'a profiles_dir that does not exist is refused at start and on SIGHUP' '
	plannerd_config bad.conf &&
	sed -i "s|^profiles_dir = .*|profiles_dir = \"$PWD/no-such-dir\";|" bad.conf &&
	test_expect_code 1 timeout 20 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "profiles_dir \"$PWD/no-such-dir\" is not a directory" err &&
	plannerd_config plannerd.conf &&
	plannerd_start &&
	sed -i "s|^profiles_dir = .*|profiles_dir = \"$PWD/no-such-dir\";|" plannerd.conf &&
	kill -HUP "$(cat plannerd.pid)" &&
	ar_wait_until 100 "plannerd to log that the reload failed" \
		grep -q "reload failed" plannerd.log &&
	grep "reload failed, keeping the running configuration: .*no-such-dir" plannerd.log &&
	ctl plan p --model toy --cluster small.json >/dev/null &&
	plannerd_stop
'

test_expect_success 'an unknown GPU in gres_map and a broken node_map glob are refused' '
	plannerd_config bad.conf "gres_map = ( { gres = \"a100_40g\"; gpu = \"b200\"; } );" &&
	test_expect_code 1 timeout 20 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "gres_map: unknown GPU \"b200\"" err &&
	plannerd_config bad.conf "node_map = ( { nodes = \"gpu[0-\"; gpu = \"fast\"; } );" &&
	test_expect_code 1 timeout 20 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "\"gpu\[0-\" is not a glob" err
'

test_expect_success 'plannerd.conf integers are not read modulo 2^32' '
	plannerd_config bad.conf "workers = 4294967297;" &&
	test_expect_code 1 "$PLANNERD" -f "$PWD/bad.conf" --show-config 2>err &&
	grep "4294967297 is out of range" err &&
	plannerd_config bad.conf "cache_entries = 4294967296;" &&
	test_expect_code 1 "$PLANNERD" -f "$PWD/bad.conf" --show-config 2>err &&
	grep "4294967296 is out of range" err
'

test_done
