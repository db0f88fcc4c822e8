/*
 * spank_gres.c - read the GPUs out of a Slurm GRES string, as slurmctld
 * reports them per node of a job ("gpu:a100:2(IDX:0-1)") or as a node is
 * configured ("gpu:h100:4,tmpdisk:100"), and the composition plannerd
 * is asked to plan for.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arachne.h"

/* Count of "0-1,3" style index lists. */
static unsigned job_idx_count(const char *s, const char *end)
{
	unsigned n = 0;

	while (s < end) {
		char *p;
		unsigned long a = strtoul(s, &p, 10), b = a;

		if (p == s)
			break;
		if (*p == '-')
			b = strtoul(p + 1, &p, 10);
		if (b >= a)
			n += (unsigned)(b - a + 1);
		s = (*p == ',') ? p + 1 : end;
	}
	return n;
}

/*
 * One GRES entry, "gpu[:TYPE][:COUNT][(IDX:...)]", copied into @entry.
 * Returns 0 for a GPU entry with a count, -1 otherwise.
 */
static int job_gres_gpu(char *entry, char *type, size_t typelen,
			unsigned *count)
{
	char *paren = strchr(entry, '(');
	char *field[3] = { NULL, NULL, NULL };
	char *save = NULL, *f;
	int nf = 0;

	if (paren)
		*paren++ = '\0';
	for (f = strtok_r(entry, ":", &save); f && nf < 3;
	     f = strtok_r(NULL, ":", &save))
		field[nf++] = f;
	if (!field[0] || strcmp(field[0], "gpu"))
		return -1;
	if (nf == 3) {
		snprintf(type, typelen, "%s", field[1]);
		*count = (unsigned)strtoul(field[2], NULL, 10);
	} else if (nf == 2 && isdigit((unsigned char)field[1][0])) {
		*count = (unsigned)strtoul(field[1], NULL, 10);
	} else if (nf == 2) {
		snprintf(type, typelen, "%s", field[1]);
	}
	/* "gpu(IDX:0,2)": no count, but the indices say how many. */
	if (!*count && paren && !strncmp(paren, "IDX:", 4))
		*count = job_idx_count(paren + 4, paren + strcspn(paren, ")"));
	return *count ? 0 : -1;
}

int job_gres_parse(const char *detail, char *type, size_t typelen,
		   unsigned *count)
{
	const char *tok = detail;

	type[0] = '\0';
	*count = 0;
	while (*tok) {
		const char *end = tok;
		char entry[256];
		int depth = 0;

		/* Commas inside "(IDX:0,2)" do not end a GRES entry. */
		for (; *end && (depth || *end != ','); end++)
			depth += (*end == '(') - (*end == ')');
		if ((size_t)(end - tok) < sizeof(entry)) {
			memcpy(entry, tok, end - tok);
			entry[end - tok] = '\0';
			if (job_gres_gpu(entry, type, typelen, count) == 0)
				return 0;
			type[0] = '\0';
			*count = 0;
		}
		tok = *end ? end + 1 : end;
	}
	return -1;
}

/*
 * A node whose GPUs have no type (neither the job's GRES nor the node's)
 * goes without "gpu": plannerd then takes it from its node_map, or from
 * hwloc when the node is its own.
 */
json_t *job_composition(const struct job_node *nodes, size_t n,
			uint32_t job_id)
{
	json_t *list = json_array();
	char name[64];

	for (size_t i = 0; i < n; i++) {
		json_t *e = json_pack("{s:i, s:s}", "gpus_per_node",
				      (int)nodes[i].gpus, "hosts",
				      nodes[i].name);

		if (nodes[i].gpu[0])
			json_object_set_new(e, "gpu",
					    json_string(nodes[i].gpu));
		json_array_append_new(list, e);
	}
	snprintf(name, sizeof(name), "slurm-job-%u", job_id);
	return json_pack("{s:s, s:o}", "name", name, "nodes", list);
}
