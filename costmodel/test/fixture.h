/*
 * fixture.h - a synthetic profiles tree for the cost model's unit tests:
 * two GPU types and small models whose layer profiles are round numbers,
 * so that expected times and memory can be worked out by hand.
 */
#ifndef AR_COSTMODEL_TEST_FIXTURE_H
#define AR_COSTMODEL_TEST_FIXTURE_H

#include <stdbool.h>

#include "ar.h"
#include "costmodel.h"

/*
 * GPU "fast": 80 GiB, 1000 TFLOPS, intra 400 GB/s, 100 Gb/s network, 4 a node.
 * GPU "slow": 40 GiB,  300 TFLOPS, intra 200 GB/s, 100 Gb/s network, 4 a node.
 *
 * Model "toy": 8 blocks, hidden 1024, seq 1024, global batch 64, 16 B/param.
 * Per layer at TP t and micro-batch b on "fast" (times 3 on "slow"):
 *   embed: fwd 0.1b, bwd 0.2b ms; act 8 MiB * b; params 64 MiB / t
 *   block: fwd 1.0b/t, bwd 2.0b/t ms, comm 0.1b(t-1) ms; act 64 MiB * b;
 *          params 256 MiB / t
 *   head:  fwd 0.5b/t, bwd 1.0b/t ms; act 128 MiB * b / t; params 64 MiB / t
 * Model "toymoe": the same with every block an MoE block of 8 experts,
 *   top-2: attn = block at half the time and params; expert at ETP e:
 *   fwd 2.0b/e, bwd 4.0b/e ms, comm 0.1b(e-1) ms, act 32 MiB * b / e,
 *   params 1024 MiB / e.
 * Model "huge": "toy" with 64 GiB of parameters per block (fits nowhere).
 */

/* Create the tree in a new temporary directory; returns its path. */
const char *fixture_create(void);
/* Remove it. */
void fixture_destroy(const char *dir);
/* Write @text to @dir/@rel (creating directories). */
void fixture_write(const char *dir, const char *rel, const char *text);

struct costmodel *fixture_load(const char *dir, const char *model);
struct costmodel_cluster *fixture_cluster(const struct costmodel *cm,
					  const char *json);
/* Parse plan JSON @json on @cl, unpriced; fails the test if it does not. */
struct costmodel_plan *fixture_plan(const struct costmodel *cm,
				    const struct costmodel_cluster *cl,
				    const char *json);

#endif
