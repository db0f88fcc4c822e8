#!/bin/sh
test_description='arachne-launch and arachne-plan --framework megatron

The launcher gives stock Megatron-LM (core_v0.12.0 and later) only the
arguments its arguments.py takes: golden argument lists and environments
for plans it runs, one torch.distributed world in Megatron'\''s rank order,
and for every plan it cannot run the property, exit status 1 and nothing
started.  arachne-plan --evaluate --framework megatron agrees with the
launcher on every plan here, and arachne-plan --framework megatron plans
only what the launcher runs and says what that costs.'
. "$(dirname "$0")/lib.sh"

LAUNCH="$top_srcdir/slurm-examples/arachne-launch"

# launch PLAN TEMPLATE STAGE TP_RANK PIPELINE NODE: a dry run of one role.
launch() {
	env ARACHNE_LAUNCH_DRY_RUN=1 ARACHNE_ROLE=worker ARACHNE_PLAN=$1 \
		ARACHNE_TEMPLATE=$2 ARACHNE_STAGE=$3 ARACHNE_TP_RANK=$4 \
		ARACHNE_PIPELINE=$5 ARACHNE_DP_RANK=$5 ARACHNE_LOCAL_GPU=$4 \
		ARACHNE_RDZV_ADDR=$6:$((29500 + $5)) CUDA_VISIBLE_DEVICES= \
		python3 "$LAUNCH" train.py --lr 1
}

test_expect_success 'setup: plans of gpt-tiny on two nodes of four GPUs' '
	gpt_clusters &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 \
		"4:n0:0,1:0-2/n0:2,3:3-9+n1:0,1:0-2/n1:2,3:3-9" >pp2.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 --set "recompute=\"selective\"" \
		--set distributed_optimizer=true \
		"8:n0:0,1:0-2/n0:2,3:3-5/n1:0,1:6-9" >pp3.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 4 "1:n0:0:0-9+n0:1:0-9+n0:2:0-9+n0:3:0-9" >dp4.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "5:n0:0:0-4/n0:1:5-9" \
		"3:n1:0,1:0-2/n1:2:3-7/n1:3:8-9" >two-templates.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "8:n0:0,1,2,3:0-3/n1:0,1:4-9" >mixed-tp.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "8:n0:0:0-1/n0:1:2-3/n0:2:4-7/n0:3:8-9" >split.json &&
	"$GPT_PLAN" --cluster c8.json --mbs 2 "3:n0:0:0-9+n0:1:0-9+n0:2:0-9" >batch.json &&
	python3 -c "import json
p = json.load(open(\"pp2.json\"))
t = p[\"templates\"][0]
t[\"replicas\"] = 1
t[\"stages\"][1][\"dp\"] = 2
t[\"stages\"][0][\"edp\"] = 2
t[\"stages\"][1][\"edp\"] = 4
t[\"placement\"] = [[{\"node\": \"n0\", \"gpus\": [0, 1]},
                     {\"node\": \"n0\", \"gpus\": [2, 3]}, {\"node\": \"n1\", \"gpus\": [0, 1]}]]
t[\"micro_batches\"] = 8
json.dump(p, open(\"stage-dp.json\", \"w\"))"
'

test_expect_success 'two stages of TP 2, two replicas: a first stage of 2 blocks of 8' '
	launch pp2.json 0 1 1 1 n1 >pp2.out &&
	cat >pp2.expected <<-\EOF &&
	MASTER_ADDR=n0 MASTER_PORT=29500 RANK=7 WORLD_SIZE=8 CUDA_VISIBLE_DEVICES=1
	train.py --lr 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2 --global-batch-size 16 --seq-length 64 --decoder-first-pipeline-num-layers 2 --sequence-parallel --overlap-grad-reduce
	EOF
	test_cmp pp2.expected pp2.out
'

test_expect_success 'every role of the plan: ranks 0..7 in Megatron-LM order' '
	for pipe in 0 1; do
		for stage in 0 1; do
			for k in 0 1; do
				launch pp2.json 0 $stage $k $pipe n$pipe | head -1 |
					sed "s/.* RANK=\([0-9]*\) .*/\1 $k $pipe $stage/" || return 1
			done
		done
	done | sort -n >ranks.out &&
	cat ranks.out &&
	awk "{ if (\$1 != NR - 1 || \$1 != \$2 + 2 * (\$3 + 2 * \$4)) bad = 1 } END { exit bad || NR != 8 }" ranks.out
'

test_expect_success 'three stages, the middle even: the first stage given; the options' '
	launch pp3.json 0 2 0 0 n0 >pp3.out &&
	cat >pp3.expected <<-\EOF &&
	MASTER_ADDR=n0 MASTER_PORT=29500 RANK=4 WORLD_SIZE=6 CUDA_VISIBLE_DEVICES=0
	train.py --lr 1 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 3 --micro-batch-size 2 --global-batch-size 16 --seq-length 64 --decoder-first-pipeline-num-layers 2 --sequence-parallel --recompute-granularity selective --recompute-modules core_attn layernorm --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
	EOF
	test_cmp pp3.expected pp3.out
'

test_expect_success 'data parallelism alone: no pipeline or split arguments' '
	launch dp4.json 0 0 0 3 n0 >dp4.out &&
	cat >dp4.expected <<-\EOF &&
	MASTER_ADDR=n0 MASTER_PORT=29500 RANK=3 WORLD_SIZE=4 CUDA_VISIBLE_DEVICES=0
	train.py --lr 1 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --micro-batch-size 4 --global-batch-size 16 --seq-length 64 --overlap-grad-reduce
	EOF
	test_cmp dp4.expected dp4.out
'

# refused PLAN TEXT: the launcher names the property, exits 1, starts nothing.
refused() {
	test_expect_code 1 launch $1.json 0 0 0 0 n0 >$1.out 2>$1.err &&
	test ! -s $1.out &&
	grep -F "arachne-launch: stock Megatron-LM cannot run $1.json: $2" $1.err
}

test_expect_success 'refused: two templates' '
	refused two-templates "several templates (2)"
'

test_expect_success 'refused: stages of TP 4 and 2' '
	refused mixed-tp "per-stage TP (stage 0 TP 4, stage 1 TP 2)"
'

test_expect_success 'refused: middle stages of 2 and 4 blocks' '
	refused split "a layer split it cannot express (transformer blocks per stage: 1 2 4 1)"
'

test_expect_success 'refused: 3 x 3 x 2 = 18 samples for a global batch of 16' '
	refused batch "a batch split it cannot express: 3 micro-batches of 2 on 3 replicas are 18 samples, not the global batch of 16"
'

test_expect_success 'refused: a stage with data parallelism of its own' '
	refused stage-dp "per-stage data parallelism (stage 1: dp 2)"
'

test_expect_success 'arachne-plan --evaluate --framework megatron agrees on every plan' '
	for p in pp2 pp3 dp4 two-templates mixed-tp split batch stage-dp; do
		launch $p.json 0 0 0 0 n0 >/dev/null 2>&1
		l=$?
		"$ARACHNE_PLAN" --model gpt-tiny --cluster c8.json --evaluate $p.json \
			--framework megatron >$p.eval 2>&1
		e=$?
		echo "$p launcher $l arachne-plan $e" &&
		test $l = 0 -a $e = 0 -o $l = 1 -a $e = 1 || return 1
	done
'

test_expect_success 'arachne-plan --framework megatron: the best plan it runs, and what that costs' '
	"$ARACHNE_PLAN" --model llama3-8b --cluster "$CLUSTERS/3type-64.json" \
		--framework megatron -q -j 1 -o meg.json >meg.out &&
	cat meg.out &&
	grep "^planner megatron: " meg.out &&
	line=$(grep "^framework megatron: " meg.out) &&
	a=$(echo "$line" | sed "s/^framework megatron: \([0-9.]*\) samples.*/\1/") &&
	u=$(echo "$line" | sed "s/.*unrestricted plan (arachne) \([0-9.]*\) samples.*/\1/") &&
	awk -v a=$a -v u=$u "BEGIN { exit !(a > 0 && a <= u) }" &&
	"$ARACHNE_PLAN" --model llama3-8b --cluster "$CLUSTERS/3type-64.json" \
		--evaluate meg.json --framework megatron >meg.eval &&
	grep "stock Megatron-LM runs this plan" meg.eval
'

test_expect_success 'the plan arachne-plan --framework megatron makes, launched role by role' '
	python3 -c "import json, subprocess, os
p = json.load(open(\"meg.json\"))
t = p[\"templates\"][0]
ranks = []
for r, row in enumerate(t[\"placement\"]):
    for s, g in enumerate(row):
        for k, gpu in enumerate(g[\"gpus\"]):
            env = dict(os.environ, ARACHNE_LAUNCH_DRY_RUN=\"1\", ARACHNE_ROLE=\"worker\",
                       ARACHNE_PLAN=\"meg.json\", ARACHNE_TEMPLATE=\"0\", ARACHNE_STAGE=str(s),
                       ARACHNE_TP_RANK=str(k), ARACHNE_PIPELINE=str(r), ARACHNE_DP_RANK=str(r),
                       ARACHNE_LOCAL_GPU=str(gpu), CUDA_VISIBLE_DEVICES=\"\",
                       ARACHNE_RDZV_ADDR=\"%s:%d\" % (row[0][\"node\"], 29500 + r))
            out = subprocess.run([\"python3\", \"$LAUNCH\", \"train.py\"], env=env, check=True,
                                 capture_output=True, text=True).stdout.split(\"\\n\")
            ranks.append(int(out[0].split(\"RANK=\")[1].split()[0]))
            assert \"MASTER_PORT=29500 \" in out[0], out[0]
assert sorted(ranks) == list(range(len(ranks))), ranks
print(len(ranks), \"roles\")"
'

test_expect_success 'an unknown framework is refused' '
	test_expect_code 1 python3 "$LAUNCH" --framework deepspeed train.py 2>fw.err &&
	grep "framework deepspeed: expected one of megatron" fw.err &&
	test_expect_code 2 "$ARACHNE_PLAN" --model gpt-tiny --cluster c8.json \
		--framework deepspeed 2>fw2.err &&
	grep "is not megatron" fw2.err
'

# Stage 0 of pp2.json, as the plugin exports it.
ROLE_ENV="ARACHNE_ROLE=worker ARACHNE_PLAN=pp2.json ARACHNE_STAGE=0
	ARACHNE_TP_RANK=0 ARACHNE_PIPELINE=0 ARACHNE_DP_RANK=0
	ARACHNE_LOCAL_GPU=0 ARACHNE_RDZV_ADDR=n0:29500"

test_expect_success '--help prints the usage and exits 0; after PROGRAM it is PROGRAM'"'"'s' '
	python3 "$LAUNCH" --help >help.out &&
	grep "^    srun arachne-launch \[--framework megatron\] PROGRAM" help.out &&
	grep "arachne-launch(1)" help.out &&
	env $ROLE_ENV ARACHNE_LAUNCH_DRY_RUN=1 \
		python3 "$LAUNCH" train.py --help >passed.out &&
	grep "^train.py --help --tensor-model-parallel-size 2 " passed.out
'

# Python ignores SIGPIPE, and exec keeps an ignored signal ignored.
test_expect_success 'PROGRAM runs with SIGPIPE at its default, not ignored' '
	env $ROLE_ENV python3 "$LAUNCH" \
		sh -c "grep SigIgn /proc/self/status" sh >sigign.out &&
	cat sigign.out &&
	mask=$(sed -n "s/^SigIgn:[[:space:]]*//p" sigign.out) &&
	test -n "$mask" &&
	test $((0x$mask >> 12 & 1)) = 0
'

# role [-u VAR | VAR=VALUE]: a dry run of that role with this change.
role() {
	env $ROLE_ENV ARACHNE_LAUNCH_DRY_RUN=1 env "$@" python3 "$LAUNCH" train.py
}

test_expect_success 'a missing or malformed role, or a bad plan, is named; nothing starts' '
	test_expect_code 1 role -u ARACHNE_ROLE 2>role.err &&
	grep "no ARACHNE_ROLE: run it under srun" role.err &&
	test_expect_code 1 role -u ARACHNE_TP_RANK >out 2>tp.err &&
	grep "ARACHNE_TP_RANK is not set: arachne.so sets it" tp.err &&
	test_expect_code 1 role ARACHNE_STAGE=one >>out 2>stage.err &&
	grep "ARACHNE_STAGE=.one. is not a number" stage.err &&
	test_expect_code 1 role ARACHNE_RDZV_ADDR=n0 >>out 2>rdzv.err &&
	grep "ARACHNE_RDZV_ADDR=.n0. is not HOST:PORT" rdzv.err &&
	test_expect_code 1 role -u ARACHNE_PLAN >>out 2>plan.err &&
	grep "no ARACHNE_PLAN" plan.err &&
	test_expect_code 1 role ARACHNE_PLAN=missing.json >>out 2>missing.err &&
	grep "cannot read the plan missing.json" missing.err &&
	echo "{\"templates\": [" >broken.json &&
	test_expect_code 1 role ARACHNE_PLAN=broken.json >>out 2>broken.err &&
	grep "cannot read the plan broken.json" broken.err &&
	echo "{\"templates\": [{}]}" >empty.json &&
	test_expect_code 1 role ARACHNE_PLAN=empty.json >>out 2>empty.err &&
	grep "the plan empty.json is not an Arachne plan (KeyError" empty.err &&
	test_must_be_empty out &&
	! grep Traceback role.err tp.err stage.err rdzv.err plan.err missing.err \
		broken.err empty.err
'

test_done
