/*
 * fixture.h - a synthetic profiles tree for the learned planner's tests:
 * three GPU types and two models heavy enough that memory, node sizes and
 * GPU counts all limit what a template may be.
 *
 *   big:   80 GiB, 1000 TFLOPS, nodes of up to 8
 *   mid:   48 GiB,  400 TFLOPS, nodes of up to 8
 *   small: 24 GiB,  150 TFLOPS, nodes of up to 4
 *
 *   "dense": 12 blocks of 1 GiB of BF16 weights (8 GiB of state at TP 1)
 *   "moe":   12 MoE blocks, 8 experts top-2, 3 GiB of expert weights
 *   "huge":  "dense" with 64 GiB of weights a block: fits nowhere
 */
#ifndef AR_POLICY_TEST_FIXTURE_H
#define AR_POLICY_TEST_FIXTURE_H

/* fixture_write(), _load(), _cluster(), _destroy(): the cost model's. */
#include "../../../costmodel/test/fixture.h"

/* Create the tree in a new temporary directory; returns its path (owned,
 * removed and freed by fixture_destroy()). */
char *pfix_create(void);

#endif
