#!/bin/sh
test_description='arachne-migrate: from two plan files through the cost model

A small profiles tree (one GPU type, a 4-block model whose layers hold a
few KB) lets the whole path run: plan JSON parsed by the cost model, the
layout from the layer profiles, --output, then the same migration under
mpirun from --from/--to, checked byte for byte.'
. "$(dirname "$0")/lib.sh"

MIGRATE="$top_builddir/migrate/arachne-migrate"
FIXTURE="$top_builddir/migrate/test/migrate-fixture"
: "${MPIRUN:=$(command -v mpirun)}"

# The shipped profiles: GPT-Neo-2.7B (34 layers, 2.77 B parameters at
# 18 B of state each: BF16 weights, FP32 gradients, 12 B of optimizer
# state) on two A6000 nodes; the second node joins as a replica, so one
# full copy (49.9 GB) crosses the 100 Gb/s link, which at the cost
# model's 0.8 efficiency moves 10 GB/s: 4.993 s at best.
neo_joins() {
	test_expect_success 'shipped profiles: a node joins a GPT-Neo-2.7B job' '
		cat >neo-cluster.json <<-\EOF &&
		{ "nodes": [ { "gpu": "a6000", "gpus_per_node": 4, "hosts": "g[1-2]" } ],
		  "inter_node_gbps": 100 }
		EOF
		stages="{ \"gpu\": \"a6000\", \"tp\": 2, \"layers\": [0, 16] },
			{ \"gpu\": \"a6000\", \"tp\": 2, \"layers\": [17, 33] }" &&
		cat >neo-old.json <<-EOF &&
		{ "arachne_plan": 1, "model": "gpt-neo-2.7b", "micro_batch": 1,
		  "templates": [ { "replicas": 1, "stages": [ $stages ],
		    "placement": [ [ { "node": "g1", "gpus": [0, 1] },
		                     { "node": "g1", "gpus": [2, 3] } ] ] } ] }
		EOF
		cat >neo-new.json <<-EOF &&
		{ "arachne_plan": 1, "model": "gpt-neo-2.7b", "micro_batch": 1,
		  "templates": [ { "replicas": 2, "stages": [ $stages ],
		    "placement": [ [ { "node": "g1", "gpus": [0, 1] },
		                     { "node": "g1", "gpus": [2, 3] } ],
		                   [ { "node": "g2", "gpus": [0, 1] },
		                     { "node": "g2", "gpus": [2, 3] } ] ] } ] }
		EOF
		"$MIGRATE" --from neo-old.json --to neo-new.json \
			--cluster neo-cluster.json --model gpt-neo-2.7b \
			--output neo.json >neo.out &&
		grep "8 ranks" neo.out &&
		grep "49.9 GB moved (minimum 49.9 GB), 49.9 GB kept in place" neo.out &&
		grep "lower bound 4.993 s" neo.out
	'
}

if ! test -x "$MIGRATE"; then
	skip_all='arachne-migrate not built'
	test_done
fi
if ! test -x "$MPIRUN"; then
	# without mpirun, only the diff of the shipped profiles can run
	neo_joins
	test_done
fi

mpi() {
	np=$1
	shift
	"$MPIRUN" --oversubscribe --allow-run-as-root -np "$np" "$MIGRATE" "$@"
}

# layer TYPE TP PARAM_BYTES_AT_TP1
layer() {
	printf '[tp%d.mbs1.%s]\nfwd_ms = 1\nbwd_ms = 2\ncomm_ms = 0\nact_bytes = 1024\nparam_bytes = %d\n\n' \
		"$2" "$1" $(($3 / $2))
}

test_expect_success 'setup: a tiny profiles tree, a cluster and two plans' '
	mkdir -p prof/gpus prof/models prof/layers/tiny &&
	cat >prof/gpus/fast.ini <<-\EOF &&
	[gpu]
	name = fast
	memory_gib = 80
	peak_tflops = 1000
	hbm_GBps = 3000
	intra_node_GBps = 400
	network_gbps = 100
	max_gpus_per_node = 4
	price_per_hour = 2
	EOF
	cat >prof/models/tiny.ini <<-\EOF &&
	[model]
	name = tiny
	blocks = 4
	hidden = 64
	ffn = 256
	heads = 4
	kv_heads = 4
	head_dim = 16
	vocab = 1000
	[training]
	seq_len = 1024
	global_batch = 16
	grad_bytes_per_param = 2
	optimizer_bytes_per_param = 12
	EOF
	{
		printf "[profile]\nmodel = tiny\ngpu = fast\nsource = analytic\nseq_len = 1024\n\n" &&
		for tp in 1 2 4; do
			layer embed $tp 4096 && layer block $tp 12288 &&
			layer head $tp 4100
		done
	} >prof/layers/tiny/fast.ini &&
	cat >cluster.json <<-\EOF &&
	{ "nodes": [ { "gpu": "fast", "gpus_per_node": 4, "hosts": "n[1-2]" } ] }
	EOF
	cat >old.json <<-\EOF &&
	{ "arachne_plan": 1, "model": "tiny", "micro_batch": 1, "templates": [
	  { "replicas": 1, "stages": [
	      { "gpu": "fast", "tp": 2, "layers": [0, 2] },
	      { "gpu": "fast", "tp": 2, "layers": [3, 5] } ],
	    "placement": [ [ { "node": "n1", "gpus": [0, 1] },
	                     { "node": "n1", "gpus": [2, 3] } ] ] } ] }
	EOF
	cat >new.json <<-\EOF
	{ "arachne_plan": 1, "model": "tiny", "micro_batch": 1, "templates": [
	  { "replicas": 2, "stages": [
	      { "gpu": "fast", "tp": 1, "layers": [0, 1] },
	      { "gpu": "fast", "tp": 4, "layers": [2, 5] } ],
	    "placement": [ [ { "node": "n1", "gpus": [0] },
	                     { "node": "n2", "gpus": [0, 1, 2, 3] } ],
	                   [ { "node": "n1", "gpus": [1] },
	                     { "node": "n1", "gpus": [0, 1, 2, 3] } ] ] } ] }
	EOF
'

test_expect_success 'a GPU used twice in one plan is refused with its name' '
	test_expect_code 2 "$MIGRATE" --from old.json --to new.json \
		--cluster cluster.json --model tiny --profiles prof \
		--output m.json 2>twice.err &&
	grep "new.json: node n1 GPU 0 is used twice" twice.err
'

test_expect_success 'setup: a valid new plan (TP 2 -> 1 and 4, a second replica)' '
	cat >new2.json <<-\EOF
	{ "arachne_plan": 1, "model": "tiny", "micro_batch": 1, "templates": [
	  { "replicas": 1, "stages": [
	      { "gpu": "fast", "tp": 1, "layers": [0, 1] },
	      { "gpu": "fast", "tp": 4, "layers": [2, 5] } ],
	    "placement": [ [ { "node": "n1", "gpus": [1] },
	                     { "node": "n2", "gpus": [0, 1, 2, 3] } ] ] },
	  { "replicas": 1, "stages": [
	      { "gpu": "fast", "tp": 2, "layers": [0, 5] } ],
	    "placement": [ [ { "node": "n1", "gpus": [2, 3] } ] ] } ] }
	EOF
'

test_expect_success '--output writes the migration without MPI' '
	"$MIGRATE" --from old.json --to new2.json --cluster cluster.json \
		--model tiny --profiles prof --output m.json >out.txt &&
	grep "8 ranks" out.txt &&
	grep "lower bound" out.txt &&
	grep "\"arachne_migration\": *1" m.json
'

test_expect_success 'mpirun --from/--to moves every byte the new plan needs' '
	mkdir st && "$FIXTURE" init m.json st &&
	ls st >old.list &&
	test "$(wc -l <old.list)" -eq 4 &&
	mpi 8 --from old.json --to new2.json --cluster cluster.json \
		--model tiny --profiles prof --state-dir st >run.out &&
	grep "arachne-migrate: migrated" run.out &&
	"$FIXTURE" verify m.json st >verify.out &&
	! grep -v " ok$" verify.out &&
	test -f st/rank-n2-3.bin && ! test -f st/rank-n1-0.bin
'

neo_joins

test_done
