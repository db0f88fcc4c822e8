#!/bin/sh
# setup.sh - install what Arachne needs on Debian 12 (as root), then build.
# Idempotent: a second run only rebuilds what changed.
set -eu
cd "$(dirname "$0")/.."

# Build tools, the libraries Arachne links, and what the tests start
# (Open MPI, munge and Slurm for the end-to-end tests, sharness).  clang
# builds the fuzz targets; llvm brings llvm-symbolizer, without which
# LeakSanitizer cannot name the libconfig frames of tests/fuzz/lsan.supp.
packages="build-essential autoconf automake libtool pkg-config ca-certificates
	libjansson-dev libiniparser-dev libconfig-dev libhwloc-dev hwloc
	libcmocka-dev libopenblas-dev sharness gnuplot-nox jq clang libclang-rt-dev llvm
	libopenmpi-dev openmpi-bin
	libslurm-dev slurmctld slurmd slurm-client munge
	python3 procps iproute2 util-linux"

missing=""
for p in $packages; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

[ -x configure ] || autoreconf -fi
[ -f Makefile ] || ./configure --quiet
make -j"$(nproc)" --no-print-directory
