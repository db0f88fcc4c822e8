#!/bin/sh
test_description='arachne-plan: plans, evaluation, exit codes'
. "$(dirname "$0")/lib.sh"

test_expect_success 'placeholder until profiles land' '
	test -x "$ARACHNE_PLAN"
'
test_done
