#!/bin/sh
# Prints the kernel version to build the module for: KVER if set, else the
# running kernel when its build tree is installed, else the newest installed
# build tree (Debian's linux-headers-amd64 on machines that cannot load modules).
set -eu
if [ -n "${KVER:-}" ]; then
	echo "$KVER"
	exit 0
fi
running=$(uname -r)
if [ -d "/lib/modules/$running/build" ]; then
	echo "$running"
	exit 0
fi
newest=$(ls -d /lib/modules/*/build 2>/dev/null | sed 's|/lib/modules/||; s|/build$||' | sort -V | tail -n 1)
if [ -z "$newest" ]; then
	echo "kver.sh: no kernel build tree under /lib/modules/*/build; run 'make setup'" >&2
	exit 1
fi
echo "$newest"
