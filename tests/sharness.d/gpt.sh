# gpt.sh - sourced by sharness for every system test: arachne-gpt, its
# test clusters (one or two nodes of four GPUs) and mpirun.
ARACHNE_GPT="$top_builddir/slurm-examples/gpt/arachne-gpt"
GPT_PLAN="$top_srcdir/tests/gpt-plan.py"
GPT_CHECK="$top_srcdir/tests/gpt-check.py"
export ARACHNE_GPT GPT_PLAN GPT_CHECK

# gpt_clusters: c4.json (node n0) and c8.json (n0, n1), four GPUs each.
gpt_clusters() {
	echo '{ "name": "gpt4", "nodes": [ { "gpu": "a100-40", "gpus_per_node": 4, "hosts": "n0" } ] }' >c4.json &&
	echo '{ "name": "gpt8", "nodes": [ { "gpu": "a100-40", "gpus_per_node": 4, "hosts": "n0,n1" } ] }' >c8.json
}

# gpt_mpi NP ARGS...: arachne-gpt on NP ranks of this machine.
gpt_mpi() {
	np=$1
	shift
	"${MPIRUN:-mpirun}" --oversubscribe --allow-run-as-root -np "$np" \
		"$ARACHNE_GPT" "$@"
}
