#!/bin/bash
# make demo: load pmm.ko on this host when it can (root, module support, a
# build tree for the running kernel), else in a VM on Debian's kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ] && [ -e /proc/modules ] && [ -d "/lib/modules/$(uname -r)/build" ] &&
	[ "$(cat /proc/sys/kernel/modules_disabled 2>/dev/null || echo 1)" = 0 ] &&
	[ "$(scripts/kver.sh)" = "$(uname -r)" ]; then
	echo "demo: on this host (kernel $(uname -r))"
	exec scripts/demo-run.sh
fi
echo "demo: this kernel cannot load pmm.ko here; booting Debian's kernel $(scripts/kver.sh) in a VM"
RESULTS=$PWD/build/demo scripts/vmtest.sh -- scripts/demo-run.sh
