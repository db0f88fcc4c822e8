#!/bin/sh
test_description='every program and library is built with the hardening configure chose'
. "$(dirname "$0")/lib.sh"

# configure's AR_HARDENING (m4/ar_compiler.m4) picks HARDEN_CFLAGS and
# HARDEN_LDFLAGS; here each ELF program and shared library of the build
# (not the test programs, nor the fuzz target, which clang builds alone)
# shows every one of them: full RELRO, the stack protector's canary check,
# glibc's fortified calls.
if ! command -v readelf >/dev/null || ! command -v nm >/dev/null; then
	skip_all="readelf and nm are not installed (Debian: binutils)"
	test_done
fi
case " $HARDEN_LDFLAGS " in *" -Wl,-z,relro "*) test_set_prereq RELRO ;; esac
case " $HARDEN_LDFLAGS " in *" -Wl,-z,now "*) test_set_prereq NOW ;; esac
case " $HARDEN_CFLAGS " in *" -fstack-protector-strong "*) test_set_prereq SSP ;; esac
case " $HARDEN_CFLAGS " in *" -D_FORTIFY_SOURCE=2 "*) test_set_prereq FORTIFY ;; esac

test_expect_success 'the build has programs and libraries to look at' '
	(cd "$top_builddir" &&
	 find -L . -type f \( -perm -u+x -o -name "*.so" \) \
		! -path "./tests/*" ! -path "*/test/*" ! -name "*.t" |
	 while read -r f; do
		readelf -h "$f" 2>/dev/null | grep -q "Type: *\(EXEC\|DYN\)" &&
		echo "$top_builddir/${f#./}"
	 done) | sort >objects &&
	cat objects &&
	grep -q "/plannerd/plannerd$" objects &&
	grep -q "/policy/arachne-plan$" objects
'

# each CHECK: run CHECK FILE on every object; name those that fail.
each() {
	while read -r f; do
		"$@" "$f" || echo "$f"
	done <objects >failed &&
	test_must_be_empty failed
}
has_relro() { readelf -lW "$1" | grep -q GNU_RELRO; }
has_now() { readelf -dW "$1" | grep -q "(FLAGS).*BIND_NOW\|(FLAGS_1).*NOW"; }
has_ssp() { nm -D "$1" | grep -q " U __stack_chk_fail"; }
has_fortify() { nm -D "$1" | grep -v __stack_chk | grep -q " U __[a-z0-9_]*_chk\(@\|$\)"; }

test_expect_success RELRO 'RELRO: each has a GNU_RELRO segment' 'each has_relro'
test_expect_success NOW 'BIND_NOW: each resolves its symbols at load' 'each has_now'
test_expect_success SSP 'stack protector: each checks its canaries' 'each has_ssp'
test_expect_success FORTIFY '_FORTIFY_SOURCE: each calls the checked glibc functions' 'each has_fortify'

test_done
