/* compose.c - site map and hwloc applied to compositions (cmocka, TAP). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ar.h"
#include "compose.h"

static struct conf *conf;
static struct topo topo4, topo0;

static int setup(void **state)
{
	char path[] = "/tmp/plannerd-compose-test.XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");

	fputs("gres_map = ( { gres = \"h100_80g\"; gpu = \"h100\"; } );\n"
	      "node_map = ( { nodes = \"gpu0*\"; gpu = \"h100\"; },\n"
	      "             { nodes = \"gpu1*\"; gpu = \"a100-40\"; },\n"
	      "             { nodes = \"gpu0[0-4]*\"; nic_gbps = 400; intra_node = \"nvlink4\"; },\n"
	      "             { nodes = \"gpu1*\"; nics = 2; nic_gbps = 200.0; } );\n"
	      "inter_node_gbps = 200;\n", f);
	fclose(f);
	if (conf_create(path, &conf) < 0)
		return -1;
	unlink(path);
	if (topo_load(PLANNERD_FIXTURES "/topo-4gpu.xml", &topo4) < 0 ||
	    topo_load(PLANNERD_FIXTURES "/topo-nogpu.xml", &topo0) < 0)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	conf_destroy(conf);
	return 0;
}

static json_t *normalize(const struct topo *topo, const char *text, int rc)
{
	json_t *in = json_loads(text, 0, NULL), *out = NULL;

	assert_non_null(in);
	assert_int_equal(compose_normalize(conf, topo, in, &out), rc);
	json_decref(in);
	return out;
}

static const char *node_gpu(json_t *cl, size_t i)
{
	return json_string_value(json_object_get(
		json_array_get(json_object_get(cl, "nodes"), i), "gpu"));
}

static long long node_per(json_t *cl, size_t i)
{
	return json_integer_value(json_object_get(
		json_array_get(json_object_get(cl, "nodes"), i), "gpus_per_node"));
}

static void test_topology_fixture(void **state)
{
	assert_string_equal(topo4.hostname, "gpu001");	/* domain cut */
	assert_int_equal(topo4.ngpus, 4);		/* BMC VGA not counted */
	assert_string_equal(topo4.gpus[0].busid, "0000:11:00.0");
	assert_string_equal(topo4.gpus[0].model, "NVIDIA H100 80GB HBM3");
	assert_int_equal(topo4.gpus[0].numa, 0);
	assert_int_equal(topo4.gpus[3].numa, 1);
	assert_int_equal(topo0.ngpus, 0);
	assert_int_equal(topo_load("/nonexistent.xml", &topo0) < 0, 1);
	assert_int_equal(topo_load(PLANNERD_FIXTURES "/topo-nogpu.xml", &topo0), 0);
}

static void test_maps(void **state)
{
	json_t *cl = normalize(NULL,
		"{\"nodes\":[{\"gpu\":\"h100_80g\",\"gpus_per_node\":4,\"count\":2},"
		"{\"hosts\":\"gpu1[00-03]\",\"gpus_per_node\":1},"
		"{\"gpu\":\"a6000\",\"gpus_per_node\":4,\"count\":1}]}", 0);

	assert_string_equal(node_gpu(cl, 0), "h100");
	assert_string_equal(node_gpu(cl, 1), "a100-40");
	assert_string_equal(node_gpu(cl, 2), "a6000");	/* not a GRES name */
	assert_true(json_real_value(json_object_get(cl, "inter_node_gbps")) == 200);
	json_decref(cl);
	cl = normalize(NULL, "{\"nodes\":[{\"gpu\":\"h100\",\"gpus_per_node\":4,\"count\":1}],"
		       "\"inter_node_gbps\":25}", 0);
	assert_int_equal(json_integer_value(json_object_get(cl, "inter_node_gbps")), 25);
	json_decref(cl);
}

static json_t *node_get(json_t *cl, size_t i, const char *key)
{
	return json_object_get(json_array_get(json_object_get(cl, "nodes"), i), key);
}

/* node_map gives a host's network and link; hwloc counts the local HCAs. */
static void test_links(void **state)
{
	json_t *cl = normalize(NULL,
		"{\"nodes\":[{\"hosts\":\"gpu0[10-12]\",\"gpus_per_node\":4},"
		"{\"hosts\":\"gpu1[00-01]\",\"gpus_per_node\":1},"
		"{\"hosts\":\"gpu020\",\"gpus_per_node\":4,\"nic_gbps\":100},"
		"{\"hosts\":\"gpu090\",\"gpus_per_node\":4}]}", 0);

	assert_true(json_real_value(node_get(cl, 0, "nic_gbps")) == 400);
	assert_string_equal(json_string_value(node_get(cl, 0, "intra_node")), "nvlink4");
	assert_null(node_get(cl, 0, "nics"));
	assert_int_equal(json_integer_value(node_get(cl, 1, "nics")), 2);
	assert_true(json_real_value(node_get(cl, 1, "nic_gbps")) == 200);
	assert_int_equal(json_integer_value(node_get(cl, 2, "nic_gbps")), 100);	/* its own */
	assert_null(node_get(cl, 3, "nic_gbps"));	/* no rule gives it links */
	json_decref(cl);
	/* hosts whose rules give different links */
	normalize(NULL, "{\"nodes\":[{\"hosts\":\"gpu0[49-50]\",\"gpus_per_node\":4}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "different links; split the entry"));
	/* this host: two HCAs in its hwloc topology, the rate from node_map */
	assert_int_equal(topo4.nics, 2);
	cl = normalize(&topo4, "{\"nodes\":[{\"hosts\":\"gpu001\"}]}", 0);
	assert_int_equal(json_integer_value(node_get(cl, 0, "nics")), 2);
	assert_true(json_real_value(node_get(cl, 0, "nic_gbps")) == 400);
	json_decref(cl);
}

static void test_map_errors(void **state)
{
	normalize(NULL, "{\"nodes\":[{\"hosts\":\"cpu01\",\"gpus_per_node\":1}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "entry 1: no gpu given and no node_map rule matches host cpu01"));
	normalize(NULL, "{\"nodes\":[{\"hosts\":\"gpu[099-100]\",\"gpus_per_node\":1}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "both h100 and a100-40"));
	normalize(NULL, "{\"nodes\":[]}", -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "non-empty array"));
	normalize(NULL, "{\"nodes\":[{\"gpu\":\"h100\",\"hosts\":\"gpu[1-\"}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "entry 1: hosts:"));
	/* found by req-fuzz: an overflowing host number */
	normalize(NULL, "{\"nodes\":[{\"hosts\":\"n[1,30000000000000000000001]\"}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "longer than 9 digits"));
	normalize(NULL, "{\"nodes\":[{\"count\":1}]}", -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "no gpu and no hosts"));
}

static void test_local_node(void **state)
{
	/* this host (gpu001) without a GPU count: hwloc's 4 */
	json_t *cl = normalize(&topo4,
		"{\"nodes\":[{\"gpu\":\"h100\",\"hosts\":\"gpu[001-002]\"},"
		"{\"gpu\":\"h100\",\"hosts\":\"gpu003\",\"gpus_per_node\":8}]}", 0);

	assert_int_equal(node_per(cl, 0), 4);
	assert_int_equal(node_per(cl, 1), 8);	/* not this host: as given */
	json_decref(cl);
	/* a count that disagrees with hwloc */
	normalize(&topo4, "{\"nodes\":[{\"hosts\":\"gpu001\",\"gpus_per_node\":8}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "gpus_per_node is 8 but hwloc finds 4 GPUs on gpu001"));
	/* the GPU from node_map, the count from hwloc */
	cl = normalize(&topo4, "{\"nodes\":[{\"hosts\":\"gpu001\"}]}", 0);
	assert_string_equal(node_gpu(cl, 0), "h100");
	assert_int_equal(node_per(cl, 0), 4);
	json_decref(cl);
	/* hwloc sees no GPU here: nothing to complete from */
	normalize(&topo0, "{\"nodes\":[{\"gpu\":\"h100\",\"hosts\":\"cpu001\"}]}",
		  -AR_EINVAL);
	assert_non_null(strstr(ar_errmsg(), "hwloc finds no GPU on cpu001"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_topology_fixture),
		cmocka_unit_test(test_maps),
		cmocka_unit_test(test_links),
		cmocka_unit_test(test_map_errors),
		cmocka_unit_test(test_local_node),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
