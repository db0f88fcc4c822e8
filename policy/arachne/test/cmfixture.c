/*
 * cmfixture.c - the cost model's test fixture helpers, shared with the
 * policy tests rather than copied (built here so that VPATH builds keep
 * their objects in the build tree).
 */
#include "../../../costmodel/test/fixture.c"
