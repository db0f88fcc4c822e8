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

int job_gres_parse(const char *detail, char *type, size_t typelen,
		   unsigned *count)
{
	const char *tok = detail;

	type[0] = '\0';
	*count = 0;
	while (tok && *tok) {
		const char *end = tok, *paren = NULL, *close = NULL;
		int depth = 0;

		/* Commas inside "(IDX:0,2)" do not end a GRES entry. */
		for (; *end && (depth || *end != ','); end++) {
			if (*end == '(' && !depth++)
				paren = end;
			else if (*end == ')' && depth && !--depth)
				close = end;
		}
		if (!strncmp(tok, "gpu", 3) && (tok[3] == ':' || tok[3] == '(' ||
		    tok + 3 == end)) {
			const char *f = tok + 3, *fend = paren ? paren : end;
			const char *idx;
			char field[2][64] = { "", "" };
			int nf = 0;

			while (f < fend && *f == ':' && nf < 2) {
				const char *c = memchr(f + 1, ':', fend - f - 1);
				size_t l = (c ? c : fend) - (f + 1);

				if (l >= sizeof(field[0]))
					l = sizeof(field[0]) - 1;
				memcpy(field[nf], f + 1, l);
				field[nf++][l] = '\0';
				f = c ? c : fend;
			}
			if (nf == 2) {
				snprintf(type, typelen, "%s", field[0]);
				*count = (unsigned)strtoul(field[1], NULL, 10);
			} else if (nf == 1 && isdigit((unsigned char)field[0][0])) {
				*count = (unsigned)strtoul(field[0], NULL, 10);
			} else if (nf == 1) {
				snprintf(type, typelen, "%s", field[0]);
			}
			idx = paren ? strstr(paren, "IDX:") : NULL;
			if (!*count && idx && close && idx < close)
				*count = job_idx_count(idx + 4, close);
			return *count ? 0 : -1;
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
