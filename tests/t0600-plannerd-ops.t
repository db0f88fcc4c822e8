#!/bin/sh
test_description='plannerd: every operation through a real daemon on a private socket'
. "$(dirname "$0")/lib.sh"

# field FILE PATH: one value of a JSON answer (PATH like .plan.micro_batch)
field() {
	python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].strip(".").split("."):
	v = v[int(k)] if isinstance(v, list) else v[k]
print(json.dumps(v) if isinstance(v, (dict, list, bool)) else v)' "$1" "$2"
}

test_expect_success 'setup: toy profiles, compositions and a daemon' '
	plannerd_profiles profiles &&
	plannerd_config plannerd.conf "replan_horizon_s = 3600.0;" &&
	cat >small.json <<-EOF &&
	{"name":"small","nodes":[{"gpu":"fast","gpus_per_node":2,"count":1},
	 {"gpu":"slow","gpus_per_node":2,"hosts":"gpu[101-102]"}]}
	EOF
	cat >grown.json <<-EOF &&
	{"name":"grown","nodes":[{"gpu":"fast","gpus_per_node":2,"count":1},
	 {"gpu":"slow","gpus_per_node":2,"hosts":"gpu[101-102]"},
	 {"gpu":"fast","gpus_per_node":2,"hosts":"gpu[110-111]"}]}
	EOF
	plannerd_start
'

test_expect_success 'ping answers with the version and the caller uid' '
	ctl --json ping >ping.json &&
	test "$(field ping.json .ok)" = true &&
	test "$(field ping.json .uid)" = "$(id -u)" &&
	ctl ping | grep "is alive"
'

test_expect_success 'plan: a plan for the composition, stored and not cached' '
	ctl --json plan 42 --model toy --cluster small.json >plan1.json &&
	test "$(field plan1.json .ok)" = true &&
	test "$(field plan1.json .job)" = 42 &&
	test "$(field plan1.json .cached)" = false &&
	test "$(field plan1.json .plan.model)" = toy &&
	test "$(field plan1.json .plan.planner.name)" = exhaustive &&
	python3 -c "import json,sys; p=json.load(open(\"plan1.json\"))[\"plan\"]
assert p[\"predicted\"][\"samples_per_s\"] > 0
# every GPU of the composition is placed or listed unused, none twice
seen = [(g[\"node\"], x) for t in p[\"templates\"] for row in t[\"placement\"] for g in row for x in g[\"gpus\"]]
seen += [(u[\"node\"], x) for u in p[\"unused\"] for x in u[\"gpus\"]]
assert len(seen) == len(set(seen)) == 6, seen" &&
	test -f state/jobs/42.json
'

test_expect_success 'plan: the same request again is answered from the store' '
	ctl --json plan 42 --model toy --cluster small.json >plan2.json &&
	test "$(field plan2.json .cached)" = true &&
	test "$(field plan1.json .plan)" = "$(field plan2.json .plan)"
'

test_expect_success 'plan: an identical request for another job comes from the cache' '
	ctl --json plan 43 --model toy --cluster small.json >plan3.json &&
	test "$(field plan3.json .cached)" = true &&
	test "$(field plan1.json .plan)" = "$(field plan3.json .plan)" &&
	test -f state/jobs/43.json
'

test_expect_success 'plan: errors name the problem' '
	test_expect_code 1 ctl plan 44 --model nosuchmodel --cluster small.json 2>err &&
	grep "not_found" err &&
	test_expect_code 1 ctl plan 44 --model toy --planner nosuch --cluster small.json 2>err &&
	grep "unknown planner" err &&
	echo "{\"nodes\":[{\"gpu\":\"tpu\",\"gpus_per_node\":2,\"count\":1}]}" >bad.json &&
	test_expect_code 1 ctl plan 44 --model toy --cluster bad.json 2>err &&
	grep "tpu" err &&
	test_must_fail test -f state/jobs/44.json
'

test_expect_success 'plan: hwloc completes this node (gpu001) and refuses a wrong count' '
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"hosts\":\"gpu001\"}]}" >local.json &&
	ctl --json plan 45 --model toy --cluster local.json >local.out &&
	test "$(field local.out .ok)" = true &&
	ctl --json show 45 >local.get &&
	test "$(field local.get .request.cluster.nodes.0.gpus_per_node)" = 4 &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"hosts\":\"gpu001\",\"gpus_per_node\":8}]}" >wrong.json &&
	test_expect_code 1 ctl plan 46 --model toy --cluster wrong.json 2>err &&
	grep "hwloc finds 4 GPUs on gpu001" err
'

test_expect_success 'get: the stored plan, its owner and request' '
	ctl --json show 42 >get.json &&
	test "$(field get.json .uid)" = "$(id -u)" &&
	test "$(field get.json .plan)" = "$(field plan1.json .plan)" &&
	test "$(field get.json .request.model.planner)" = exhaustive &&
	test_expect_code 1 ctl show 999 2>err &&
	grep "not_found: job 999: no stored plan" err
'

test_expect_success 'replan: a grown composition, with both numbers' '
	ctl --json replan 42 --cluster grown.json >replan.json &&
	test "$(field replan.json .ok)" = true &&
	python3 -c "import json; r=json.load(open(\"replan.json\"))
assert r[\"new_samples_per_s\"] > r[\"old_samples_per_s\"] > 0, r
assert r[\"horizon_s\"] == 3600
g = 3600 * (1 - r[\"old_samples_per_s\"] / r[\"new_samples_per_s\"])
assert abs(r[\"gain_s\"] - g) < 1e-6 * g, (r[\"gain_s\"], g)
assert r[\"kept\"] == (r[\"gain_s\"] <= r[\"migration_s\"])
assert not r[\"kept\"], r[\"reason\"]
m = r[\"migration\"]
assert m[\"arachne_migration\"] == 1 and m[\"tuples\"], m
assert m[\"predicted\"][\"time_s\"] == r[\"migration_s\"] > 0, m[\"predicted\"]
# one node list for both plans: the grown composition, in its order
assert [n[\"name\"] for n in m[\"nodes\"]][-2:] == [\"gpu110\", \"gpu111\"], m[\"nodes\"]
assert \"more than\" in r[\"reason\"]" &&
	ctl --json show 42 >after.json &&
	test "$(field after.json .request.cluster.name)" = grown &&
	test "$(field after.json .plan)" = "$(field replan.json .plan)"
'

test_expect_success 'replan: a short horizon keeps the old plan and says why' '
	ctl --json replan 43 --cluster grown.json --horizon-s 0.001 >keep.json &&
	python3 -c "import json; r=json.load(open(\"keep.json\"))
assert r[\"kept\"] is True, r
assert r[\"gain_s\"] <= r[\"migration_s\"]
assert r[\"migration\"] is None
assert r[\"new_samples_per_s\"] > r[\"old_samples_per_s\"] > 0, r
assert \"no more than the\" in r[\"reason\"], r[\"reason\"]" &&
	test "$(field keep.json .plan)" = "$(field plan3.json .plan)"
'

test_expect_success 'replan: no faster plan for the new composition, and the answer says that' '
	ctl --json replan 43 --cluster small.json >same.json &&
	python3 -c "import json; r=json.load(open(\"same.json\"))
assert r[\"kept\"] is True and r[\"gain_s\"] == 0, r
assert r[\"new_samples_per_s\"] <= r[\"old_samples_per_s\"], r
assert r[\"reason\"].startswith(\"no plan for the new composition is faster: \"), r[\"reason\"]" &&
	test "$(field same.json .plan)" = "$(field plan3.json .plan)"
'

test_expect_success 'replan: after nodes leave, the old plan cannot stay' '
	ctl --json replan 42 --cluster small.json --horizon-s 0.001 >shrink.json &&
	python3 -c "import json; r=json.load(open(\"shrink.json\"))
assert r[\"kept\"] is False and r[\"old_samples_per_s\"] == 0, r
assert \"does not fit\" in r[\"reason\"], r[\"reason\"]"
'

test_expect_success 'forget: the plan and its file are gone' '
	ctl forget 43 | grep "job 43 forgotten" &&
	test_must_fail test -f state/jobs/43.json &&
	test_expect_code 1 ctl show 43 &&
	test_expect_code 1 ctl forget 43 2>err &&
	grep not_found err
'

test_expect_success 'status counts what happened' '
	ctl --json status >status.json &&
	python3 -c "import json; s=json.load(open(\"status.json\"))
assert s[\"plans_stored\"] == 2, s   # 42 and 45
assert s[\"cache_hits\"] == 2, s     # the same job, then job 43
assert s[\"plans_made\"] == 2, s     # 42 and 45
assert s[\"replans\"] == 4, s
assert s[\"errors\"] == 7, s
assert s[\"requests\"] == 23, s  # each ctl call is one; the start-up ping too
assert s[\"node\"][\"gpus\"] == 4 and s[\"node\"][\"hostname\"] == \"gpu001\"
assert s[\"planner\"] == \"exhaustive\" and s[\"uptime_s\"] > 0"
'

test_expect_success 'plans survive a restart and still answer from the store' '
	plannerd_stop &&
	test_must_fail test -S "$PLANNERD_SOCK" &&
	plannerd_start &&
	ctl --json show 45 >again.json &&
	test "$(field again.json .plan)" = "$(field local.get .plan)" &&
	ctl --json plan 45 --model toy --cluster local.json >again2.json &&
	test "$(field again2.json .cached)" = true
'

test_expect_success 'SIGHUP reloads the config without dropping a client' '
	python3 "$PLANNERD_FIXTURES/hold.py" "$PLANNERD_SOCK" "$(cat plannerd.pid)" >hold.out &&
	grep "^before ok" hold.out && grep "^after ok" hold.out &&
	ctl --json status >st.json &&
	test "$(field st.json .budget_s)" = 2.5 &&
	grep "configuration reloaded" plannerd.log
'

# The sequence length a job asks for (arachnectl --seq-len, the plugin's
# --arachne=seq_len=) reaches the cost model: the plan is made and priced
# at that length, its attention core growing with the square.
test_expect_success 'plan: the sequence length asked for prices the plan' '
	ctl --json plan 47 --model toy --cluster small.json --seq-len 2048 >seq.json &&
	test "$(field seq.json .plan.seq_len)" = 2048 &&
	test "$(field plan1.json .plan.seq_len)" = 1024 &&
	test "$(field seq.json .cached)" = false &&
	python3 -c "import json,sys
a, b = (json.load(open(f))[\"plan\"][\"predicted\"][\"iter_s\"] for f in (\"plan1.json\", \"seq.json\"))
sys.exit(not 1.9 < b / a < 3)" &&
	field seq.json .plan >seq-plan.json &&
	"$ARACHNE_PLAN" --evaluate seq-plan.json -d profiles --model toy --cluster small.json \
		--format json >seq-eval.json &&
	test "$(field seq-eval.json .predicted.iter_s)" = "$(field seq.json .plan.predicted.iter_s)"
'

test_expect_success 'SIGTERM finishes the plan in flight, then exits 0' '
	cat >big.json <<-EOF &&
	{"nodes":[{"gpu":"fast","gpus_per_node":4,"count":2},{"gpu":"slow","gpus_per_node":4,"count":2}]}
	EOF
	ctl --json plan 50 --model toy --cluster big.json >inflight.json &
	client=$! &&
	sleep 0.3 &&
	plannerd_stop &&
	wait $client &&
	test "$(field inflight.json .ok)" = true &&
	test -f state/jobs/50.json &&
	test_must_fail test -S "$PLANNERD_SOCK"
'

test_expect_success 'arachnectl says so when the daemon is down' '
	test_expect_code 3 ctl ping 2>err &&
	grep "cannot connect to plannerd at .*plannerd.sock.*is plannerd running" err
'

test_done
