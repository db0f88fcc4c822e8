/* migrate-scenario.c - the plan builders of migrate's tests, shared. */
#include "../migrate/test/scenario.c"
