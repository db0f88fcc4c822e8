#!/bin/sh
test_description='plannerd: bad clients, many clients, and a daemon that keeps serving'
. "$(dirname "$0")/lib.sh"

client() {
	ar_bounded 60 "client.py $1" python3 "$PLANNERD_FIXTURES/client.py" "$PLANNERD_SOCK" "$@"
}
LOAD="$top_builddir/plannerd/plannerd-load"

test_expect_success 'setup: a daemon with small limits' '
	plannerd_profiles profiles &&
	plannerd_config plannerd.conf "max_request_bytes = 4096;" \
		"client_timeout_s = 1.0;" "max_clients = 1100;" &&
	plannerd_start
'

test_expect_success 'malformed requests get protocol errors; the connection lives on' '
	client malformed >out &&
	printf "protocol\nprotocol\nprotocol\nok\n" >expect &&
	test_cmp expect out
'

test_expect_success 'a request over max_request_bytes: too_large, then closed' '
	client oversize >out &&
	printf "too_large\nclosed\nok\n" >expect &&
	test_cmp expect out
'

test_expect_success 'half a line and a stall: others served, the staller timed out' '
	client stall >out &&
	printf "other ok\nother-fast True\ntimeout\nwaited True\nclosed\n" >expect &&
	test_cmp expect out
'

test_expect_success 'a client that leaves mid-answer does not hurt the daemon' '
	client leave >out &&
	echo "after ok" >expect &&
	test_cmp expect out &&
	grep "left before its answer was written" plannerd.log
'

test_expect_success '1,000 concurrent clients: each gets an answer' '
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2,\"count\":1}]}" >c.json &&
	ctl plan warmup --model toy --cluster c.json &&
	{
		echo "{\"op\":\"plan\",\"job\":\"j\$JOB\",\"user\":\"root\",\"model\":\"toy\",\"cluster\":$(cat c.json)}" &&
		echo "{not json" &&
		echo "{\"op\":\"ping\"}"
	} >requests &&
	ar_bounded 120 "plannerd-load (1,000 clients)" "$LOAD" -s "$PLANNERD_SOCK" -c 1000 -n 3 requests >load.json &&
	cat load.json &&
	python3 -c "import json; r=json.load(open(\"load.json\"))
assert r[\"answers\"] == 3000 and r[\"failed\"] == 0, r
assert r[\"ok\"] == 2000 and r[\"errors\"] == 1000, r" &&
	ctl --json status >status.json &&
	python3 -c "import json; s=json.load(open(\"status.json\"))
assert s[\"plans_stored\"] == 1001, s
assert s[\"plans_made\"] == 1, s" &&
	test $(ls state/jobs | wc -l) = 1001
'

test_expect_success 'setup: a daemon for three clients' '
	plannerd_stop &&
	plannerd_config plannerd.conf "max_clients = 3;" &&
	plannerd_start &&
	mkfifo hold
'

test_expect_success 'beyond max_clients: busy, and served again once they leave' '
	client hold 3 <hold >held &
	holder=$! &&
	exec 9>hold &&
	ar_wait_until 100 "client.py to hold 3 connections" grep -q holding held &&
	test_expect_code 1 ctl ping 2>err &&
	grep "busy: too many clients" err &&
	exec 9>&- &&
	wait $holder &&
	ctl ping
'

test_expect_success 'the daemon is still healthy and stops cleanly' '
	ctl ping &&
	plannerd_stop
'

test_done
