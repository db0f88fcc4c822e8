# SYNOPSIS
#   AR_WARNINGS, AR_ENABLE_SANITIZERS, AR_CHECK_PTHREAD
#
# DESCRIPTION
#   AR_WARNINGS substitutes AR_CFLAGS with the warnings every target builds
#   with.  AR_ENABLE_SANITIZERS adds --enable-sanitizers, which builds
#   everything with AddressSanitizer and UndefinedBehaviorSanitizer so that
#   `make check` runs the unit tests under them.  AR_CHECK_PTHREAD checks
#   that -pthread links and substitutes PTHREAD_CFLAGS and PTHREAD_LIBS.

AC_DEFUN([AR_WARNINGS], [
  AR_CFLAGS="-Wall -Wextra -Wno-unused-parameter -Wshadow -Wformat=2 -Wstrict-prototypes -Wmissing-prototypes -Wvla"
  AC_SUBST([AR_CFLAGS])
])

AC_DEFUN([AR_ENABLE_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers],
      [build with ASan and UBSan (for make check) @<:@default=no@:>@])],
    [], [enable_sanitizers=no])
  ar_sanitizers=no
  AS_IF([test "x$enable_sanitizers" = xyes], [
    ar_san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
    ar_save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS $ar_san"
    ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $ar_san"
    AC_MSG_CHECKING([whether $CC supports ASan and UBSan])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])],
      [AC_MSG_RESULT([yes]); ar_sanitizers=yes],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-sanitizers given but $CC cannot link with $ar_san])])
    CFLAGS=$ar_save_CFLAGS; LDFLAGS=$ar_save_LDFLAGS
    SANITIZER_CFLAGS=$ar_san
    SANITIZER_LDFLAGS=$ar_san])
  AC_SUBST([SANITIZER_CFLAGS])
  AC_SUBST([SANITIZER_LDFLAGS])
  AM_CONDITIONAL([ENABLE_SANITIZERS], [test "x$ar_sanitizers" = xyes])
])

AC_DEFUN([AR_CHECK_PTHREAD], [
  ar_save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS -pthread"
  AC_MSG_CHECKING([whether $CC accepts -pthread])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]],
      [[pthread_t t; return pthread_create(&t, 0, 0, 0);]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([POSIX threads are required])])
  CFLAGS=$ar_save_CFLAGS
  AC_SUBST([PTHREAD_CFLAGS], [-pthread])
  AC_SUBST([PTHREAD_LIBS], [-pthread])
])
