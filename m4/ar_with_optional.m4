# SYNOPSIS
#   AR_WITH_MPI, AR_WITH_CUDA, AR_WITH_NCCL, AR_WITH_SLURM
#
# DESCRIPTION
#   Optional dependencies, each --with-X=check|yes|no|PATH (default check).
#   "check" builds the feature when the dependency is found; "yes" or a PATH
#   is an explicit request, and configure fails when it cannot be met (as
#   hwloc does for its GPU backends).  Each defines HAVE_X, sets the
#   automake conditional HAVE_X and substitutes X_CPPFLAGS, X_LDFLAGS and
#   X_LIBS for the targets that use it, never the global LIBS.

# _AR_OPT_PATHS(var, with-value, include-subdirs, lib-subdirs)
AC_DEFUN([_AR_OPT_PATHS], [
  AS_CASE([$2], [yes|check|no], [], [
    $1_CPPFLAGS=""
    for ar_d in $3; do
      AS_IF([test -d "$2/$ar_d"], [$1_CPPFLAGS="$$1_CPPFLAGS -I$2/$ar_d"])
    done
    $1_LDFLAGS=""
    for ar_d in $4; do
      AS_IF([test -d "$2/$ar_d"],
        [$1_LDFLAGS="$$1_LDFLAGS -L$2/$ar_d -Wl,-rpath,$2/$ar_d"])
    done])
])

# _AR_OPT_FINISH(NAME, var, have-var, with-value, what)
AC_DEFUN([_AR_OPT_FINISH], [
  AS_IF([test "x$$3" = xno && test "x$4" != xcheck && test "x$4" != xno],
    [AC_MSG_ERROR([--with-$1=$4 given but $5 is not usable])])
  AS_IF([test "x$$3" = xyes],
    [AC_DEFINE([HAVE_]m4_toupper($1), [1], [Define if $5 is available])])
  AC_SUBST($2[_CPPFLAGS])
  AC_SUBST($2[_LDFLAGS])
  AC_SUBST($2[_LIBS])
  AM_CONDITIONAL([HAVE_]m4_toupper($1), [test "x$$3" = xyes])
])

AC_DEFUN([AR_WITH_MPI], [
  AC_ARG_WITH([mpi],
    [AS_HELP_STRING([--with-mpi@<:@=check|yes|no|PATH@:>@],
      [MPI for arachne-migrate @<:@default=check@:>@])],
    [], [with_mpi=check])
  ar_have_mpi=no
  AS_IF([test "x$with_mpi" != xno], [
    AS_CASE([$with_mpi], [yes|check],
      [PKG_CHECK_MODULES([MPI], [ompi-c], [ar_have_mpi=yes],
        [PKG_CHECK_MODULES([MPI], [mpich], [ar_have_mpi=yes], [ar_have_mpi=no])])
       MPI_CPPFLAGS=$MPI_CFLAGS],
      [_AR_OPT_PATHS([MPI], [$with_mpi], [include], [lib lib64])
       ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $MPI_CPPFLAGS"
       ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $MPI_LDFLAGS"
       AC_CHECK_HEADER([mpi.h],
         [AC_CHECK_LIB([mpi], [MPI_Init], [ar_have_mpi=yes; MPI_LIBS=-lmpi])])
       CPPFLAGS=$ar_save_CPPFLAGS; LDFLAGS=$ar_save_LDFLAGS])
    AS_IF([test "x$ar_have_mpi" = xyes],
      [AC_PATH_PROG([MPIRUN], [mpirun], [], [$with_mpi/bin$PATH_SEPARATOR$PATH])])])
  _AR_OPT_FINISH([mpi], [MPI], [ar_have_mpi], [$with_mpi], [MPI])
  AC_SUBST([MPIRUN])
])

AC_DEFUN([AR_WITH_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=check|yes|no|PATH@:>@],
      [CUDA runtime and cuBLAS for arachne-profile measure @<:@default=check, PATH=/usr/local/cuda@:>@])],
    [], [with_cuda=check])
  ar_have_cuda=no
  AS_IF([test "x$with_cuda" != xno], [
    ar_cuda_path=$with_cuda
    AS_CASE([$with_cuda], [yes|check], [ar_cuda_path=/usr/local/cuda])
    _AR_OPT_PATHS([CUDA], [$ar_cuda_path], [include], [lib64 lib])
    ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADER([cuda_runtime.h],
      [AC_CHECK_LIB([cudart], [cudaGetDeviceCount],
        [AC_CHECK_LIB([cublas], [cublasCreate_v2],
          [ar_have_cuda=yes; CUDA_LIBS="-lcublas -lcudart"])])])
    CPPFLAGS=$ar_save_CPPFLAGS; LDFLAGS=$ar_save_LDFLAGS
    AS_UNSET([ac_cv_header_cuda_runtime_h])])
  _AR_OPT_FINISH([cuda], [CUDA], [ar_have_cuda], [$with_cuda], [the CUDA runtime with cuBLAS])
])

AC_DEFUN([AR_WITH_NCCL], [
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=check|yes|no|PATH@:>@],
      [NCCL for the migrate NCCL transport @<:@default=check, PATH=/usr/local/cuda@:>@])],
    [], [with_nccl=check])
  ar_have_nccl=no
  AS_IF([test "x$with_nccl" != xno && test "x$ar_have_cuda" = xyes], [
    ar_nccl_path=$with_nccl
    AS_CASE([$with_nccl], [yes|check], [ar_nccl_path=/usr/local/cuda])
    _AR_OPT_PATHS([NCCL], [$ar_nccl_path], [include], [lib lib64])
    ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS $NCCL_CPPFLAGS"
    ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $CUDA_LDFLAGS $NCCL_LDFLAGS"
    AC_CHECK_HEADER([nccl.h],
      [AC_CHECK_LIB([nccl], [ncclCommInitRank], [ar_have_nccl=yes; NCCL_LIBS=-lnccl],
        [], [-lcudart])])
    CPPFLAGS=$ar_save_CPPFLAGS; LDFLAGS=$ar_save_LDFLAGS])
  _AR_OPT_FINISH([nccl], [NCCL], [ar_have_nccl], [$with_nccl], [NCCL (it needs the CUDA runtime)])
])

AC_DEFUN([AR_WITH_SLURM], [
  AC_ARG_WITH([slurm],
    [AS_HELP_STRING([--with-slurm@<:@=check|yes|no|PATH@:>@],
      [Slurm's headers (slurm/spank.h, for the arachne.so plugin) and
       libslurm (for arachnectl's elastic commands and plannerd's pruning
       of finished jobs) @<:@default=check@:>@])],
    [], [with_slurm=check])
  AC_ARG_WITH([slurm-plugindir],
    [AS_HELP_STRING([--with-slurm-plugindir=DIR],
      [where arachne.so is installed @<:@default: the directory of the
       installed Slurm's plugins, found next to libslurm (Debian:
       /usr/lib/x86_64-linux-gnu/slurm-wlm)@:>@])],
    [], [with_slurm_plugindir=])
  ar_have_slurm=no
  ar_have_libslurm=no
  AS_IF([test "x$with_slurm" != xno], [
    _AR_OPT_PATHS([SLURM], [$with_slurm], [include], [lib lib64])
    ar_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $SLURM_CPPFLAGS"
    ar_save_LDFLAGS=$LDFLAGS; LDFLAGS="$LDFLAGS $SLURM_LDFLAGS"
    AC_CHECK_HEADER([slurm/spank.h], [ar_have_slurm=yes])
    AS_IF([test "x$ar_have_slurm" = xyes],
      [AC_CHECK_LIB([slurm], [slurm_load_job],
        [ar_have_libslurm=yes; SLURM_LIBS=-lslurm])])
    CPPFLAGS=$ar_save_CPPFLAGS; LDFLAGS=$ar_save_LDFLAGS])
  _AR_OPT_FINISH([slurm], [SLURM], [ar_have_slurm], [$with_slurm], [slurm/spank.h (Debian: libslurm-dev)])
  AS_IF([test "x$ar_have_libslurm" = xyes],
    [AC_DEFINE([HAVE_LIBSLURM], [1], [Define if libslurm can be linked])])
  AM_CONDITIONAL([HAVE_LIBSLURM], [test "x$ar_have_libslurm" = xyes])

  # Slurm loads plugins from its PluginDir only.  Unless told, install
  # arachne.so where the installed Slurm keeps its own plugins: next to
  # libslurm, in slurm-wlm/ (Debian) or slurm/ (Slurm's own default).
  AC_MSG_CHECKING([for Slurm's plugin directory])
  AS_IF([test -z "$with_slurm_plugindir" && test "x$ar_have_slurm" = xyes], [
    ar_libdirs=
    AS_CASE([$with_slurm], [yes|check|no], [
      ar_lib=`$CC $SLURM_LDFLAGS -print-file-name=libslurm.so 2>/dev/null`
      AS_IF([test -n "$ar_lib" && test "x$ar_lib" != xlibslurm.so],
        [ar_libdirs=`cd "\`dirname "$ar_lib"\`" && pwd -P`])
      ar_libdirs="$ar_libdirs /usr/lib64 /usr/lib /usr/local/lib"],
      [ar_libdirs="$with_slurm/lib64 $with_slurm/lib"])
    for ar_d in $ar_libdirs; do
      for ar_sub in slurm-wlm slurm; do
        AS_IF([test -z "$with_slurm_plugindir" && ls "$ar_d/$ar_sub"/*.so >/dev/null 2>&1],
          [with_slurm_plugindir="$ar_d/$ar_sub"])
      done
    done])
  AS_IF([test -z "$with_slurm_plugindir"], [
    with_slurm_plugindir='${libdir}/slurm'
    AS_IF([test "x$ar_have_slurm" = xyes],
      [AC_MSG_WARN([no Slurm plugin directory found: arachne.so goes to LIBDIR/slurm; give --with-slurm-plugindir=DIR (scontrol show config | grep PluginDir)])])])
  AC_MSG_RESULT([$with_slurm_plugindir])
  AC_SUBST([SLURM_PLUGINDIR], [$with_slurm_plugindir])
])
