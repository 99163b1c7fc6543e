#!/bin/bash
# Where monitored exact mode spends its time (run in the VM, pmm.ko loaded):
# the clock and system-call costs, then the microbenchmark bare, under the
# fake-device build (the hook's own work + one ioctl on /dev/null per batch,
# no kernel work) and monitored exact (+ the module's work on every record).
#   bench/profile_guest.sh [ITERATIONS [THREADS]]
set -u
cd "$(dirname "$0")/.."
n=${1:-300000}
bin=bench/bin
fake=hooklib/libpmmhook-fake.so
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
$bin/clock_bench 200000
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
one() {
	local name=$1 b0 b1
	shift
	b0=$(busy)
	env PMM_QUIET=1 "$@" $bin/malloc_bench -t "$threads" -n $((n / threads)) >/dev/null
	b1=$(busy)
	awk -v n="$name" -v d=$((b1 - b0)) -v it="$n" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "%-34s cpu %6.2f s  %7.0f ns/iteration\n", n, d / hz, d / hz * 1e9 / it }'
}
threads=${2:-1}
echo "malloc_bench: $threads thread(s), $n iterations in all"
for rep in 1 2 3; do
	one "fake device, exact, vDSO clock" LD_PRELOAD=$fake PMM_CLOCK=mono
	one bare
	one "fake device, exact (hook only)" LD_PRELOAD=$fake
	one "fake device, sampled" LD_PRELOAD=$fake PMM_SAMPLE=524288
	one "module, exact" LD_PRELOAD=hooklib/libpmmhook.so PMM_START=1
done
echo "guest cpu flags: $(grep -o -w -E "constant_tsc|nonstop_tsc" /proc/cpuinfo | sort -u | tr "\n" " ")"
