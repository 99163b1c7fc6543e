#!/bin/bash
# Runs inside the VM (scripts/test-kernels.sh): does the module load on this
# kernel, then the kernel-facing part of the guest suite (PMM_GUEST_TESTS,
# below) through run.sh. Writes loaded (or insmod.txt) into PMM_RESULTS.
set -u
cd "$PMM_TOP"
results=${PMM_RESULTS:-/tmp}
uname -r >"$results/uname.txt"
if insmod "$PMM_KO" 2>"$results/insmod.txt" && rmmod pmm 2>>"$results/insmod.txt"; then
	touch "$results/loaded"
else
	echo "kernel: insmod $PMM_KO failed: $(cat "$results/insmod.txt")"
	exit 1
fi
# The tests of what the kernel does (the module's ioctls and its selftest,
# /proc/pmm, the sampler, pairing, stress and fuzz, the hostile callers, the
# hook against the module, modprobe of the installed module); pmctl's, pmd's
# and the packages' tests are Python over the same ioctls, on the running
# kernel's line (make test).
export PMM_GUEST_TESTS="${PMM_GUEST_TESTS:-tests/guest/test_kmod_ioctl.py tests/guest/test_kmod_pairing.py
	tests/guest/test_kmod_proc.py tests/guest/test_kmod_sampler.py tests/guest/test_kmod_stress.py
	tests/guest/test_hostile.py tests/guest/test_hook_lib.py tests/guest/test_install.py}"
exec tests/guest/run.sh
