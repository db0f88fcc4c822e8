# SYNOPSIS
#   AR_CHECK_INIPARSER, AR_CHECK_BLAS, AR_CHECK_SHARNESS
#
# DESCRIPTION
#   Required dependencies that ship no pkg-config file on Debian 12.
#   AR_CHECK_INIPARSER substitutes INIPARSER_CFLAGS/INIPARSER_LIBS (Debian
#   installs the header under include/iniparser/).  AR_CHECK_BLAS finds a
#   CBLAS (OpenBLAS first, by pkg-config, else -lcblas/-lblas) and
#   substitutes BLAS_CFLAGS/BLAS_LIBS.  AR_CHECK_SHARNESS locates
#   sharness.sh for the system tests (SHARNESS_SH; --with-sharness=PATH).

AC_DEFUN([AR_CHECK_INIPARSER], [
  AC_ARG_VAR([INIPARSER_CFLAGS], [C compiler flags for iniparser])
  AC_ARG_VAR([INIPARSER_LIBS], [linker flags for iniparser])
  AS_IF([test -z "$INIPARSER_CFLAGS" && test -d /usr/include/iniparser],
    [INIPARSER_CFLAGS=-I/usr/include/iniparser])
  AS_IF([test -z "$INIPARSER_LIBS"], [INIPARSER_LIBS=-liniparser])
  ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $INIPARSER_CFLAGS"
  ar_save_LIBS=$LIBS; LIBS="$INIPARSER_LIBS $LIBS"
  AC_CHECK_HEADER([iniparser.h], [],
    [AC_MSG_ERROR([iniparser.h not found (Debian: libiniparser-dev)])])
  AC_MSG_CHECKING([for iniparser_load])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <iniparser.h>]],
      [[return iniparser_load("x") != 0;]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([libiniparser not usable])])
  CPPFLAGS=$ar_save_CPPFLAGS; LIBS=$ar_save_LIBS
])

AC_DEFUN([AR_CHECK_BLAS], [
  PKG_CHECK_MODULES([BLAS], [openblas], [ar_have_blas=yes], [ar_have_blas=no])
  AS_IF([test "x$ar_have_blas" = xno], [
    AC_CHECK_LIB([cblas], [cblas_sgemm], [BLAS_LIBS=-lcblas; ar_have_blas=yes],
      [AC_CHECK_LIB([blas], [cblas_sgemm], [BLAS_LIBS=-lblas; ar_have_blas=yes])])])
  AS_IF([test "x$ar_have_blas" = xno],
    [AC_MSG_ERROR([no CBLAS found (Debian: libopenblas-dev)])])
  ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $BLAS_CFLAGS"
  AC_CHECK_HEADER([cblas.h], [],
    [AC_MSG_ERROR([cblas.h not found (Debian: libopenblas-dev)])])
  CPPFLAGS=$ar_save_CPPFLAGS
  AC_SUBST([BLAS_CFLAGS])
  AC_SUBST([BLAS_LIBS])
])

AC_DEFUN([AR_CHECK_SHARNESS], [
  AC_ARG_WITH([sharness],
    [AS_HELP_STRING([--with-sharness=PATH],
      [sharness.sh for the system tests @<:@default=/usr/share/sharness/sharness.sh@:>@])],
    [], [with_sharness=/usr/share/sharness/sharness.sh])
  ar_have_sharness=no
  AS_IF([test -r "$with_sharness"], [ar_have_sharness=yes],
    [AC_MSG_WARN([sharness.sh not found at $with_sharness: system tests will be skipped])])
  AC_SUBST([SHARNESS_SH], [$with_sharness])
])
