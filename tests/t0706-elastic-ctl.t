#!/bin/sh
test_description='arachnectl pending and commit on a plan directory made by hand

No Slurm and no plannerd: the elastic commands that only read and write the
plan directory.  A joined job whose leave the running job committed (it held
no state, so nothing waited for its ranks) hears that it is out.'
. "$(dirname "$0")/lib.sh"

CTL="$top_builddir/plannerd/arachnectl"

# A running job 4 with a pending leave of job 5 that moves nothing; the
# comment is off, as after a resize, so that no Slurm is asked.
test_expect_success 'setup: job 5 leaves job 4, pending' '
	mkdir -m 1777 plans &&
	mkdir -m 700 plans/4 &&
	cat >plans/4/state.json <<-EOF
	{"arachne_state": 2, "job_id": 4, "uid": $(id -u), "submit_time": 1,
	 "generation": 4, "comment": false, "joined": [], "left": [5],
	 "pending": {"op": "leave", "generation": 4, "from": 3, "job": 5,
	  "release": ["node3"], "deadline": $(( $(date +%s) + 600 )),
	  "phase": "planned", "previous": {"joined": [5]}}}
	EOF
'

test_expect_success 'the leaving job has its part while the change is pending' '
	"$CTL" --plan-dir plans pending 5 >pending.out &&
	grep "^4 leave [0-9]* -$" pending.out
'

test_expect_success 'the running job commits: nothing moved' '
	"$CTL" --plan-dir plans commit 4 >commit.out &&
	grep "^job 4: generation 4 (leave) committed$" commit.out
'

test_expect_success 'then the left job is told it is out (exit 4), the running job that nothing waits (exit 1)' '
	test_expect_code 4 "$CTL" --plan-dir plans pending 5 >left.out 2>left.err &&
	test_must_be_empty left.out &&
	grep "^arachnectl: job 5 has left job 4 (generation 4 is in force): nothing waits for it$" left.err &&
	test_expect_code 1 "$CTL" --plan-dir plans pending 4 >none.out 2>&1 &&
	test_must_be_empty none.out
'

test_expect_success 'arachnectl list: every job for root' '
	"$CTL" --plan-dir plans list >list.out &&
	grep "^4 *[0-9a-z]* *4 *- *(no plan yet)$" list.out
'

if test "$(id -u)" = 0 && command -v setpriv >/dev/null &&
   setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$CTL"; then
	test_set_prereq AS_NOBODY
fi

test_expect_success AS_NOBODY 'arachnectl list: only your own jobs for another user' '
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$CTL" --plan-dir "$PWD/plans" list >nobody.out 2>nobody.err &&
	test "$(cat nobody.out)" = "$(head -n 1 list.out)" &&
	grep "no job of yours has a plan directory in $PWD/plans" nobody.err
'

test_done
