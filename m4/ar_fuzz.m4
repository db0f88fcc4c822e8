# SYNOPSIS
#   AR_CHECK_FUZZER
#
# DESCRIPTION
#   Looks for a clang that links libFuzzer targets (-fsanitize=fuzzer,
#   Debian: clang).  Substitutes FUZZ_CC and sets the automake conditional
#   HAVE_FUZZER; `make check` then builds the fuzz targets under tests/fuzz
#   and runs each for a bounded time.  Without clang they are skipped.

AC_DEFUN([AR_CHECK_FUZZER], [
  AC_ARG_VAR([FUZZ_CC], [clang with libFuzzer, for the fuzz targets])
  AS_IF([test -z "$FUZZ_CC"], [AC_PATH_PROGS([FUZZ_CC], [clang clang-16 clang-15 clang-14])])
  ar_have_fuzzer=no
  AS_IF([test -n "$FUZZ_CC"], [
    AC_MSG_CHECKING([whether $FUZZ_CC links -fsanitize=fuzzer])
    cat >conftest-fuzz.c <<ARFUZZ
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n > 99; }
ARFUZZ
    AS_IF([$FUZZ_CC -fsanitize=fuzzer,address,undefined conftest-fuzz.c -o conftest-fuzz >&AS_MESSAGE_LOG_FD 2>&1],
      [ar_have_fuzzer=yes])
    rm -f conftest-fuzz.c conftest-fuzz
    AC_MSG_RESULT([$ar_have_fuzzer])])
  AM_CONDITIONAL([HAVE_FUZZER], [test "x$ar_have_fuzzer" = xyes])
])
