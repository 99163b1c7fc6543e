#!/bin/bash
# Installs what building and testing pmm needs, idempotently: Debian packages
# (only when one is missing) and the Python venv at .venv/ (only when
# pyproject.toml changed since it was made).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential bc flex bison libelf-dev libssl-dev dwarves cpio kmod
	qemu-system-x86 busybox-static linux-image-amd64 linux-headers-amd64
	sparse sqlite3 xz-utils perl g++ heaptrack valgrind binutils file procps util-linux strace linux-source-6.1
	libjemalloc2 libunwind-dev python3-pip redis-server redis-tools
	debuginfod elfutils golang-go chromium
	prometheus dkms help2man lintian
	python3-pygments python3-mdurl python3-shellingham
	python3-dateutil python3-six python3-tabulate python3-pluggy python3-sqlite-fts4)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
		exit 1
	fi
	echo "setup: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=.venv/.pmm-stamp
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	echo "setup: creating .venv"
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -e '.[dev]'
	echo "$want" >"$stamp"
fi
