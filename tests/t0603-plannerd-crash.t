#!/bin/sh
test_description='plannerd: kill -9 in a burst of writes, restart, stale and busy sockets'
. "$(dirname "$0")/lib.sh"

LOAD="$top_builddir/plannerd/plannerd-load"

test_expect_success 'setup' '
	plannerd_profiles profiles &&
	plannerd_config plannerd.conf &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2,\"count\":1}]}" >c.json &&
	echo "{\"op\":\"plan\",\"job\":\"j\$JOB\",\"user\":\"root\",\"model\":\"toy\",\"cluster\":$(cat c.json)}" >requests &&
	plannerd_start &&
	ctl plan first --model toy --cluster c.json
'

test_expect_success 'kill -9 during a burst of plan writes' '
	ar_bounded 60 "plannerd-load (a burst of 6,400 plans)" "$LOAD" -s "$PLANNERD_SOCK" -c 16 -n 400 requests >load.json &
	load=$! &&
	sleep 1 &&
	kill -9 "$(cat plannerd.pid)" &&
	{ wait $load; true; } &&
	ls state/jobs >files &&
	test $(grep -c "\.json$" files) -gt 20
'

test_expect_success 'every stored plan parses; none is half-written' '
	python3 -c "import json, os
n = 0
for f in os.listdir(\"state/jobs\"):
	if \".tmp.\" in f:
		continue
	d = json.load(open(\"state/jobs/\" + f))
	assert d[\"job\"] + \".json\" == f and d[\"plan\"][\"templates\"], f
	n += 1
print(n)" >stored
'

test_expect_success 'restart: stale socket replaced, leftovers removed, plans served' '
	test -S "$PLANNERD_SOCK" &&
	plannerd_start &&
	grep "removing a stale socket" plannerd.log &&
	test $(ls state/jobs | grep -c "\.tmp\.") = 0 &&
	ctl --json status >status.json &&
	python3 -c "import json; s=json.load(open(\"status.json\"))
assert s[\"plans_stored\"] == int(open(\"stored\").read()), s" &&
	ctl show first >/dev/null
'

test_expect_success 'a second daemon does not displace a live one' '
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/plannerd.conf" \
		--topology "$PLANNERD_FIXTURES/topo-4gpu.xml" 2>err &&
	grep "another plannerd is serving it" err &&
	ctl ping &&
	plannerd_stop
'

test_expect_success 'a socket path too long for sun_path is a clear error' '
	long=$PWD/$(printf "%0120d" 0).sock &&
	plannerd_config long.conf "socket_path = \"$long\";" &&
	sed -i "1d" long.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/long.conf" 2>err &&
	grep "longer than the 107 a Unix socket address holds" err
'

test_expect_success 'a file that is not a socket is never removed' '
	echo precious >"$PLANNERD_SOCK" &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/plannerd.conf" 2>err &&
	grep "exists and is not a socket" err &&
	grep precious "$PLANNERD_SOCK"
'

test_done
