"""The kernel interface: what the pmm module and Linux's /proc tell about a process.

The module's ABI (`uapi`, the mirror of kmod/uapi/pmm.h), its device
(`device`: /dev/pmm's ioctls, live blocks paged by `blockstream`), its
netlink events (`genl`), its text files /proc/pmm/cfg and /proc/pmm/pid
(`pmmfiles`), and the plain data all of them give (`model`). From Linux's
/proc: a process sampled when the module does not (`sampler`) and its
mappings (`smaps`). Everything above this layer reads the kernel through it.
"""
