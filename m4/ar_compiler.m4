# SYNOPSIS
#   AR_WARNINGS, AR_ENABLE_SANITIZERS, AR_HARDENING, AR_CHECK_PTHREAD
#
# DESCRIPTION
#   AR_WARNINGS substitutes AR_CFLAGS with the warnings every target builds
#   with.  AR_ENABLE_SANITIZERS adds --enable-sanitizers, which builds
#   everything with AddressSanitizer and UndefinedBehaviorSanitizer so that
#   `make check` runs the unit tests under them.  AR_HARDENING adds
#   --disable-hardening; by default every program and library is built as
#   pyxis builds its SPANK plugin: -fstack-protector-strong,
#   -D_FORTIFY_SOURCE=2 (not with the sanitizers, nor without
#   optimization, where glibc ignores it), -Wl,-z,relro -Wl,-z,now, each
#   flag kept only when the compiler takes it without a warning; it
#   substitutes HARDEN_CFLAGS and HARDEN_LDFLAGS.  AR_CHECK_PTHREAD checks
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

AC_DEFUN([AR_HARDENING], [
  AC_REQUIRE([AR_ENABLE_SANITIZERS])
  AC_ARG_ENABLE([hardening],
    [AS_HELP_STRING([--disable-hardening],
      [build without stack protector, _FORTIFY_SOURCE and full RELRO @<:@default=enabled@:>@])],
    [], [enable_hardening=yes])
  HARDEN_CFLAGS=
  HARDEN_LDFLAGS=
  ar_hardening=no
  AS_IF([test "x$enable_hardening" != xno], [
    ar_hardening=yes
    ar_harden_c="-fstack-protector-strong"
    AS_IF([test "x$ar_sanitizers" != xyes],
      [ar_harden_c="$ar_harden_c -D_FORTIFY_SOURCE=2"])
    for ar_flag in $ar_harden_c; do
      AC_MSG_CHECKING([whether $CC takes $ar_flag])
      ar_save_CFLAGS=$CFLAGS; CFLAGS="$CFLAGS -Werror -U_FORTIFY_SOURCE $ar_flag"
      AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <stdio.h>]],
          [[char b[8]; return snprintf(b, sizeof(b), "%d", 1);]])],
        [AC_MSG_RESULT([yes]); HARDEN_CFLAGS="$HARDEN_CFLAGS $ar_flag"],
        [AC_MSG_RESULT([no])])
      CFLAGS=$ar_save_CFLAGS
    done
    AS_CASE([" $HARDEN_CFLAGS "], [*" -D_FORTIFY_SOURCE=2 "*],
      [HARDEN_CFLAGS="-U_FORTIFY_SOURCE $HARDEN_CFLAGS"])
    for ar_flag in "-Wl,-z,relro" "-Wl,-z,now"; do
      AC_MSG_CHECKING([whether $CC links with $ar_flag])
      ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $ar_flag"
      AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])],
        [AC_MSG_RESULT([yes]); HARDEN_LDFLAGS="$HARDEN_LDFLAGS $ar_flag"],
        [AC_MSG_RESULT([no])])
      LDFLAGS=$ar_save_LDFLAGS
    done
    HARDEN_CFLAGS=`echo $HARDEN_CFLAGS`
    HARDEN_LDFLAGS=`echo $HARDEN_LDFLAGS`])
  AC_SUBST([HARDEN_CFLAGS])
  AC_SUBST([HARDEN_LDFLAGS])
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
