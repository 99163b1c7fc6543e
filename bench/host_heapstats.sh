#!/bin/bash
# What the hook's heap report costs (hooklib/heap.c, docs/performance.md):
# glibc's mallinfo2() and jemalloc's epoch + stats on heaps of 10^4..10^6
# blocks with half of them free, made by 1 and 8 threads. One line a run:
# allocator, blocks, threads, free chunks, median and max ns of 21 reports.
set -euo pipefail
cd "$(dirname "$0")"
make -s bin/heapstats_bench
jemalloc=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
for n in 10000 100000 1000000; do
	for t in 1 8; do
		bin/heapstats_bench "$n" "$t" 21
		if [ -e "$jemalloc" ]; then
			LD_PRELOAD=$jemalloc bin/heapstats_bench "$n" "$t" 21
		fi
	done
done
