#!/bin/sh
test_description='plannerd: peer-credential authorization and socket permissions'
# Other users must reach the socket and the client: the build tree may
# sit under a directory they cannot enter (/root), so the trash directory
# goes under /tmp and the client is copied into it.
if [ "$(id -u)" = 0 ]; then
	root=$(mktemp -d /tmp/arachne-t0601.XXXXXX) && chmod 755 "$root"
fi
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
	skip_all='needs root and setpriv to act as other users'
	test_done
fi
cp "$ARACHNECTL" ./arachnectl && chmod 755 ./arachnectl . "$AR_SOCK_DIR" || exit 1
ARACHNECTL=$PWD/arachnectl
cleanup 'cd / && rm -rf "$root"'

# as USER ctl ARGS...: arachnectl run as USER (nobody, daemon)
as() {
	user=$1
	shift
	setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups "$@"
}

test_expect_success 'setup: daemon with slurm_user daemon' '
	plannerd_profiles profiles &&
	plannerd_config plannerd.conf "slurm_user = \"daemon\";" &&
	echo "{\"nodes\":[{\"gpu\":\"fast\",\"gpus_per_node\":2,\"count\":1}]}" >c.json &&
	chmod 644 c.json &&
	plannerd_start &&
	ctl plan 100 --model toy --cluster c.json
'

test_expect_success 'the daemon sees the caller uid' '
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 ping >out &&
	grep "uid 65534" out
'

# Another user's job answers exactly as a job that does not exist: the
# answer used to name its owner, and tell it from an unknown id.
test_expect_success 'nobody may not read, replan or forget root'"'"'s job, nor learn of it' '
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 show 999 2>unknown &&
	grep "not_found: job 999: no stored plan" unknown &&
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 show 100 2>err &&
	sed s/100/999/ err | test_cmp unknown - &&
	test_must_fail grep "uid 0" err &&
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 forget 100 2>err &&
	grep "not_found: job 100: no stored plan" err &&
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 replan 100 --cluster c.json 2>err &&
	grep "not_found: job 100: no stored plan" err &&
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 plan 100 --model toy --cluster c.json 2>err &&
	grep "permission: job 100 is another user" err &&
	test_must_fail grep "uid 0" err &&
	ctl show 100 >/dev/null
'

test_expect_success 'nobody may not plan as another user' '
	test_expect_code 1 as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 plan 201 --user root --model toy --cluster c.json 2>err &&
	grep "may plan only as itself" err &&
	test_expect_code 1 ctl show 201
'

test_expect_success 'nobody is served for its own job' '
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 plan 200 --model toy --cluster c.json &&
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 --json show 200 >get.json &&
	grep "\"uid\":65534" get.json &&
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 replan 200 --cluster c.json &&
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 forget 200 &&
	test_expect_code 1 ctl show 200
'

test_expect_success 'slurm_user acts on any job and plans for others' '
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 plan 300 --model toy --cluster c.json &&
	as daemon "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 show 300 >/dev/null &&
	as daemon "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 plan 301 --user nobody --model toy --cluster c.json &&
	ctl --json show 301 >get.json &&
	grep "\"uid\":65534" get.json &&
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 show 301 >/dev/null &&
	as daemon "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 forget 100
'

test_expect_success 'a 0600 socket in group nogroup keeps others out' '
	plannerd_stop &&
	plannerd_config plannerd.conf "socket_mode = \"0660\";" "socket_group = \"nogroup\";" &&
	sed -i "/socket_mode = \"0666\"/d" plannerd.conf &&
	plannerd_start &&
	test "$(stat -c %a:%G "$PLANNERD_SOCK")" = 660:nogroup &&
	test_expect_code 3 as daemon "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 ping 2>err &&
	grep "Permission denied" err &&
	as nobody "$ARACHNECTL" -s "$PLANNERD_SOCK" -t 60 ping &&
	plannerd_stop
'

test_done
