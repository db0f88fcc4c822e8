/*
 * cmfixture.c - the cost model's synthetic profiles tree, shared with its
 * tests rather than copied (built here so that VPATH builds keep their
 * objects in the build tree).
 */
#include "../../costmodel/test/fixture.c"
