// SPDX-License-Identifier: GPL-2.0
/*
 * A QEMU TCG plugin (QEMU 7.2, plugin API version 1) that counts the guest
 * instructions executed by all vCPUs, kernel and user, and writes the count
 * each time a vCPU executes the marker instruction (bench/icount/mark.c):
 *
 *   qemu-system-x86_64 ... -plugin bench/icount/bin/libicount.so,out=FILE
 *
 * appends "K COUNT" to FILE per marker, K being the marker's low byte.
 *
 * Counting is per translation block: code inlined at the start of each block
 * adds the block's instruction count to one counter (no call: the cheapest
 * way). A block left early (a page fault in its middle) counts its remaining
 * instructions too; that is rare and repeats from run to run. QEMU executes a
 * rep-prefixed string instruction one iteration per block, so each iteration
 * counts (rep stosb clearing a page: 4096).
 *
 * The inline add is not atomic: QEMU must run all vCPUs in one host thread,
 * -accel tcg,thread=single. With one thread per vCPU (QEMU's default for an
 * x86 guest) it lost 12-19% of a two-threaded program's instructions; with
 * one thread it agreed exactly with per-vCPU counters kept by a callback.
 * Markers seen from two host threads mean several: the plugin then writes a
 * "#" line, which bench/icount_report.py refuses.
 *
 * With prof=FILE it also profiles the guest kernel: each kernel block's
 * instructions go to a counter of its start address (inline adds too), and
 * at each "mark stop" the counters of the run are appended to FILE as
 * "ADDRESS COUNT" lines after a "= RUN" line (RUN: the stop markers so far,
 * from 1), then cleared. bench/icount_prof.py turns them into functions and
 * source lines with the guest's /proc/kallsyms.
 *
 * Debian ships no qemu-plugin.h, so the few declarations used are written out
 * below from QEMU's plugin documentation (the ABI of API version 1).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* --- QEMU plugin API, version 1: only what this plugin uses --- */
#define EXPORT __attribute__((visibility("default")))

typedef uint64_t plugin_id_t;
struct plugin_tb;		/* opaque: a block being translated */
struct plugin_insn;		/* opaque: one of its instructions */

struct plugin_info {		/* qemu_info_t */
	const char *target_name;
	struct {
		int min;
		int cur;
	} version;
	_Bool system_emulation;
	union {
		struct {
			int smp_vcpus;
			int max_vcpus;
		} system;
	};
};

enum { CB_NO_REGS = 0 };	/* enum qemu_plugin_cb_flags */

typedef void (*tb_trans_cb_t)(plugin_id_t id, struct plugin_tb *tb);
typedef void (*vcpu_udata_cb_t)(unsigned int vcpu_index, void *udata);

void qemu_plugin_register_vcpu_tb_trans_cb(plugin_id_t id, tb_trans_cb_t cb);
enum { INLINE_ADD_U64 = 0 };	/* enum qemu_plugin_op */
void qemu_plugin_register_vcpu_tb_exec_inline(struct plugin_tb *tb, int op, void *ptr,
					      uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct plugin_insn *insn, vcpu_udata_cb_t cb,
					    int flags, void *udata);
size_t qemu_plugin_tb_n_insns(const struct plugin_tb *tb);
struct plugin_insn *qemu_plugin_tb_get_insn(const struct plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct plugin_insn *insn);
uint64_t qemu_plugin_tb_vaddr(const struct plugin_tb *tb);
size_t qemu_plugin_insn_size(const struct plugin_insn *insn);

/* QEMU refuses a plugin without it, or newer than it supports */
EXPORT int qemu_plugin_version = 1;
/* --- end of the API --- */

static uint64_t count;		/* instructions of all vCPUs */
static int out_fd = -1;
static pid_t marker_tid;	/* the host thread of the first marker */

/*
 * prof=: a counter per kernel block start address, open addressing, never
 * moved (the translated code adds to it in place). Blocks retranslated at
 * one address share its counter.
 */
#define PROF_BITS	20
#define PROF_SLOTS	(1U << PROF_BITS)
#define KERNEL_START	0xffff800000000000ULL

struct prof_ent {
	uint64_t vaddr;		/* 0: empty */
	uint64_t count;		/* instructions since the last stop marker */
};

static struct prof_ent *prof;
static unsigned int prof_used;
static int prof_fd = -1;
static unsigned int prof_runs;

static uint64_t *prof_counter(uint64_t vaddr)
{
	unsigned int i = (unsigned int)(vaddr * 0x9e3779b97f4a7c15ULL >> (64 - PROF_BITS));

	while (prof[i].vaddr && prof[i].vaddr != vaddr)
		i = (i + 1) & (PROF_SLOTS - 1);
	if (!prof[i].vaddr) {
		if (prof_used >= PROF_SLOTS / 2)
			return NULL;	/* full: the block counts in the total only */
		prof[i].vaddr = vaddr;
		prof_used++;
	}
	return &prof[i].count;
}

/* appends the run's counters to the prof file and clears them */
static void prof_dump(void)
{
	static char buf[1 << 16];
	size_t len;
	unsigned int i;

	len = (size_t)snprintf(buf, sizeof(buf), "= %u\n", ++prof_runs);
	for (i = 0; i < PROF_SLOTS; i++) {
		if (!prof[i].count)
			continue;
		if (len > sizeof(buf) - 64) {
			if (write(prof_fd, buf, len) != (ssize_t)len)
				perror("icount: prof write");
			len = 0;
		}
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%llx %llu\n",
					(unsigned long long)prof[i].vaddr,
					(unsigned long long)prof[i].count);
		prof[i].count = 0;
	}
	if (write(prof_fd, buf, len) != (ssize_t)len)
		perror("icount: prof write");
}

static void prof_clear(void)
{
	unsigned int i;

	for (i = 0; i < PROF_SLOTS; i++)
		prof[i].count = 0;
}

/*
 * The marker: nopl 0x504d4d00+K(%rax,%rax,1), 8 bytes, "PMM" in the top
 * bytes of its displacement. A no-op for the guest; nothing else emits it.
 */
static const unsigned char marker[8] = { 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x4d, 0x4d, 0x50 };

static void put(const char *line, int len)
{
	/* one unbuffered write: nothing to flush when QEMU exits */
	if (write(out_fd, line, (size_t)len) != len)
		perror("icount: write");
}

static void marker_exec(unsigned int vcpu, void *k)
{
	static const char several[] =
		"# not exact: vCPUs in several host threads (-accel tcg,thread=single)\n";
	char line[64];
	int len;

	(void)vcpu;
	if (!marker_tid)
		marker_tid = gettid();
	else if (marker_tid != gettid())
		put(several, sizeof(several) - 1);
	len = snprintf(line, sizeof(line), "%u %llu\n", (unsigned int)(uintptr_t)k,
		       (unsigned long long)count);
	put(line, len);
	if (prof && (uintptr_t)k == 1)
		prof_clear();
	else if (prof && (uintptr_t)k == 2)
		prof_dump();
}

static void tb_trans(plugin_id_t id, struct plugin_tb *tb)
{
	size_t i, n = qemu_plugin_tb_n_insns(tb);
	uint64_t vaddr = qemu_plugin_tb_vaddr(tb), *c;

	(void)id;
	qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, &count, n);
	if (prof && vaddr >= KERNEL_START) {
		c = prof_counter(vaddr);
		if (c)
			qemu_plugin_register_vcpu_tb_exec_inline(tb, INLINE_ADD_U64, c, n);
	}
	for (i = 0; i < n; i++) {
		struct plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		const unsigned char *b = qemu_plugin_insn_data(insn);

		if (qemu_plugin_insn_size(insn) == sizeof(marker) &&
		    !memcmp(b, marker, 4) && !memcmp(b + 5, marker + 5, 3))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, marker_exec, CB_NO_REGS,
							       (void *)(uintptr_t)b[4]);
	}
}

EXPORT int qemu_plugin_install(plugin_id_t id, const struct plugin_info *info,
			       int argc, char **argv)
{
	const char *out = NULL, *prof_out = NULL;
	int i;

	for (i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4))
			out = argv[i] + 4;
		else if (!strncmp(argv[i], "prof=", 5))
			prof_out = argv[i] + 5;
	}
	if (!out || !info->system_emulation) {
		fprintf(stderr, "icount: usage: -plugin libicount.so,out=FILE[,prof=FILE] "
			"(system emulation)\n");
		return -1;
	}
	if (prof_out) {
		prof = calloc(PROF_SLOTS, sizeof(*prof));
		prof_fd = open(prof_out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
			       0644);
		if (!prof || prof_fd < 0) {
			perror(prof_out);
			return -1;
		}
	}
	out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (out_fd < 0) {
		perror(out);
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	return 0;
}
