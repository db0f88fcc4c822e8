#!/bin/sh
test_description='plannerd: configuration errors, --show-config, reload, systemd notify'
. "$(dirname "$0")/lib.sh"

test_expect_success 'setup' '
	plannerd_profiles profiles
'

test_expect_success 'an unknown directive stops the start with file:line' '
	printf "budget_s = 1.0;\n\nsocket_pth = \"/tmp/x\";\n" >bad.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "$PWD/bad.conf:3: socket_pth: unknown directive" err
'

test_expect_success 'invalid values stop the start with file:line and the reason' '
	printf "workers = -2;\n" >bad.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "bad.conf:1: workers: -2 is outside \[0, 1024\]" err &&
	printf "# c\nlog_level = \"chatty\";\n" >bad.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "bad.conf:2: log_level: \"chatty\" is not one of" err &&
	printf "budget_s = ;\n" >bad.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "bad.conf:1: syntax error" err &&
	printf "planner = \"oracle\";\n" >bad.conf &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/bad.conf" 2>err &&
	grep "planner: \"oracle\" is not a planner of this build" err &&
	test_expect_code 1 "$PLANNERD" -F -f "$PWD/missing.conf" 2>err &&
	grep "missing.conf: cannot read" err
'

test_expect_success '--show-config prints what is in effect, and it reads back' '
	plannerd_config plannerd.conf "gres_map = ( { gres = \"h100_80g\"; gpu = \"fast\"; } );" &&
	"$PLANNERD" -f "$PWD/plannerd.conf" --show-config >shown &&
	grep "^budget_s = 5;" shown &&
	grep "^gres_map = ( { gres = \"h100_80g\"; gpu = \"fast\"; } );" shown &&
	grep "^client_timeout_s = 30;" shown &&
	"$PLANNERD" -f "$PWD/shown" --show-config >shown2 &&
	tail -n +2 shown >a && tail -n +2 shown2 >b && test_cmp a b
'

test_expect_success 'the shipped example documents every directive and parses' '
	example="$top_srcdir/plannerd/plannerd.conf" &&
	"$PLANNERD" --directives | sed -n "s/^\\\\fB\([a-z_]*\)\\\\fR = .*/\1/p" >names &&
	test $(wc -l <names) -ge 20 &&
	for n in $(cat names); do
		grep -q "^#$n = " "$example" || { echo "$n undocumented"; return 1; }
	done &&
	sed -e "s/^#\([^ #-]\)/\1/" "$example" >uncommented.conf &&
	"$PLANNERD" -f "$PWD/uncommented.conf" --show-config >/dev/null
'

test_expect_success 'the site map from the config is applied to requests' '
	plannerd_start &&
	echo "{\"nodes\":[{\"gpu\":\"h100_80g\",\"gpus_per_node\":2,\"count\":1}]}" >gres.json &&
	ctl --json plan 1 --model toy --cluster gres.json >out &&
	ctl --json show 1 >get &&
	grep "\"gpu\":\"fast\"" get &&
	# Every answer names the composition as planned, the GRES type
	# mapped: planned, from the store, and a replan onto two nodes.
	ctl --json plan 1 --model toy --cluster gres.json >again &&
	echo "{\"nodes\":[{\"gpu\":\"h100_80g\",\"gpus_per_node\":2,\"count\":2}]}" >gres2.json &&
	ctl --json replan 1 --cluster gres2.json >replan &&
	python3 -c "import json, sys
for f, cached, count in ((\"out\", False, 1), (\"again\", True, 1), (\"replan\", None, 2)):
    a = json.load(open(f))
    nodes = a[\"cluster\"][\"nodes\"]
    assert [n[\"gpu\"] for n in nodes] == [\"fast\"], (f, nodes)
    assert nodes[0][\"count\"] == count, (f, nodes)
    assert cached is None or a[\"cached\"] is cached, (f, a[\"cached\"])
"
'

test_expect_success 'a reload with a broken config keeps the running one' '
	echo "budget_s = \"soon\";" >>plannerd.conf &&
	kill -HUP "$(cat plannerd.pid)" &&
	sleep 0.5 &&
	grep "reload failed, keeping the running configuration" plannerd.log &&
	ctl --json status | grep "\"budget_s\":5.0" &&
	plannerd_stop
'

test_expect_success 'systemd: READY, RELOADING and STOPPING over NOTIFY_SOCKET' '
	plannerd_config plannerd.conf &&
	python3 "$PLANNERD_FIXTURES/notify.py" "$AR_SOCK_DIR/notify.sock" 4 >notes &
	notifier=$! &&
	ar_wait_until 100 "notify.py to bind $AR_SOCK_DIR/notify.sock" grep -q bound notes &&
	NOTIFY_SOCKET="$AR_SOCK_DIR/notify.sock" plannerd_start &&
	kill -HUP "$(cat plannerd.pid)" &&
	sleep 0.5 &&
	plannerd_stop &&
	ar_wait_until 250 "notify.py to get 4 messages" plannerd_gone $notifier &&
	wait $notifier &&
	printf "bound\nREADY=1\nRELOADING=1\nREADY=1\nSTOPPING=1\n" >expect &&
	test_cmp expect notes
'

test_expect_success 'without -F the daemon detaches once it serves' '
	"$PLANNERD" -f "$PWD/plannerd.conf" \
		--topology "$PLANNERD_FIXTURES/topo-4gpu.xml" &&
	ctl ping &&
	pid=$(ctl --json status >/dev/null && pgrep -f "plannerd -f $PWD/plannerd.conf") &&
	kill -TERM $pid &&
	ar_wait_until 100 "the detached plannerd (pid $pid) to exit" plannerd_gone $pid &&
	test_must_fail test -S "$PLANNERD_SOCK"
'

test_done
