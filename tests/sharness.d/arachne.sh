# arachne.sh - sourced by sharness for every system test: where the built
# programs and the profiles are.
: "${top_builddir:=$SHARNESS_BUILD_DIRECTORY/..}"
: "${top_srcdir:=$SHARNESS_TEST_SRCDIR/..}"
ARACHNE_PLAN="$top_builddir/policy/arachne-plan"
AR_PROFILES="$top_srcdir/profiles"
CLUSTERS="$top_srcdir/profiles/clusters"
export ARACHNE_PLAN AR_PROFILES CLUSTERS top_builddir top_srcdir
