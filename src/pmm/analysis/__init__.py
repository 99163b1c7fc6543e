"""The analysis: what pmm concludes from what the kernel layer and the store read.

The detectors and tables are pure logic, no I/O: the leak detector over a
process's samples (`trend`), where its growth goes (`growthkind`), live
blocks grouped by site (`leaks`), the allocation statistics (`stats`). Around
them, what `pmctl trend` reads (`samplesource`) and shows (`trendview`: the
verdict and its forms) and what `pmctl leaks` shows (`leakview`).
"""
