// SPDX-License-Identifier: GPL-2.0
/*
 * pmm: objects. Where a site's frames are, in terms that outlive the
 * process: for each return address, the mapped file it is in and the offset
 * in that file, found at PMM_REGISTER_SITE while the code is certainly
 * mapped (the addresses are on the registering thread's stack). Each file is
 * numbered once per process (its object), with its path and its GNU
 * build-id read from the file itself, so that a symbolizer can find its
 * debug info after the process, or even the file, is gone. Nothing here is
 * a load address: offsets are relative to the file.
 *
 * The object table is under the process's lock; reading a file and
 * d_path happen outside it (they may sleep on I/O), and so does the mmap
 * lock, which is never taken inside the process's lock. A known file is
 * found by its mapped inode, with no I/O: the file is read once.
 */
#include <linux/slab.h>
#include <linux/mm.h>
#include <linux/fs.h>
#include <linux/file.h>
#include <linux/elf.h>
#include <linux/dcache.h>
#include <linux/kdev_t.h>
#include <linux/sched/mm.h>
#include "pmm_int.h"

/* Bounds on what is read of an ELF file to find its build-id. */
#define PMM_ELF_MAX_PHDRS	64
#define PMM_ELF_MAX_NOTE	4096
#define NT_GNU_BUILD_ID_TYPE	3

static bool note_build_id(const u8 *buf, size_t len, size_t align,
			  struct pmm_object *o)
{
	size_t off = 0;

	while (off + 3 * sizeof(u32) <= len) {
		const u32 *h = (const u32 *)(buf + off);
		u32 namesz = h[0], descsz = h[1], type = h[2];
		size_t name = off + 3 * sizeof(u32);
		/* as binfmt_elf and binutils: the header and name, aligned */
		size_t desc = off + ALIGN(3 * sizeof(u32) + (size_t)namesz, align);

		if (namesz > len || descsz > len || desc + descsz > len)
			return false;
		if (type == NT_GNU_BUILD_ID_TYPE && namesz == 4 &&
		    !memcmp(buf + name, "GNU", 4) && descsz &&
		    descsz <= PMM_BUILD_ID_MAX) {
			memcpy(o->build_id, buf + desc, descsz);
			o->build_id_len = descsz;
			o->flags |= PMM_OBJ_F_BUILD_ID;
			return true;
		}
		off = desc + ALIGN((size_t)descsz, align);
	}
	return false;
}

/* The GNU build-id of a 64-bit native-endian ELF file, from its PT_NOTEs. */
static void read_build_id(struct file *f, struct pmm_object *o)
{
	struct elf64_phdr *ph = NULL;
	struct elf64_hdr eh;
	u8 *note = NULL;
	loff_t pos = 0;
	size_t len;
	u32 i;

	if (kernel_read(f, &eh, sizeof(eh), &pos) != sizeof(eh))
		return;
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != (IS_ENABLED(CONFIG_CPU_BIG_ENDIAN) ?
				    ELFDATA2MSB : ELFDATA2LSB) ||
	    eh.e_phentsize != sizeof(*ph) || !eh.e_phnum ||
	    eh.e_phnum > PMM_ELF_MAX_PHDRS)
		return;
	ph = kmalloc_array(eh.e_phnum, sizeof(*ph), GFP_KERNEL);
	note = kmalloc(PMM_ELF_MAX_NOTE, GFP_KERNEL);
	if (!ph || !note)
		goto out;
	pos = eh.e_phoff;
	len = eh.e_phnum * sizeof(*ph);
	if (kernel_read(f, ph, len, &pos) != len)
		goto out;
	for (i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_NOTE || !ph[i].p_filesz ||
		    ph[i].p_filesz > PMM_ELF_MAX_NOTE)
			continue;
		pos = ph[i].p_offset;
		len = ph[i].p_filesz;
		if (kernel_read(f, note, len, &pos) != len)
			continue;
		if (note_build_id(note, len, ph[i].p_align == 8 ? 8 : 4, o))
			break;
	}
out:
	kfree(note);
	kfree(ph);
}

/*
 * An object in the process's table: what readers get, and the key it is
 * found by, the mapped inode's (with its generation, so that a reused inode
 * number is another file). The key needs no I/O; readers get the identity
 * stat() reports instead (on overlayfs the mapped inode is the lower one,
 * with another device number than the path the process and its readers see).
 */
struct pmm_obj_ent {
	struct pmm_object o;
	dev_t key_dev;
	unsigned long key_ino;
	u32 key_gen;
};

static struct kmem_cache *pmm_obj_cache;

int pmm_objects_init(void)
{
	pmm_obj_cache = kmem_cache_create("pmm_object",
					  sizeof(struct pmm_obj_ent), 0,
					  SLAB_ACCOUNT, NULL);
	return pmm_obj_cache ? 0 : -ENOMEM;
}

void pmm_objects_exit(void)
{
	kmem_cache_destroy(pmm_obj_cache);
}

static void object_key(struct file *f, struct pmm_obj_ent *e)
{
	struct inode *inode = file_inode(f);

	e->key_dev = inode->i_sb->s_dev;
	e->key_ino = inode->i_ino;
	e->key_gen = inode->i_generation;
}

/*
 * The identity of f as stat() reports it, from what the file system has
 * in memory (no round trip to a network or FUSE server from inside the
 * process's malloc).
 */
static void object_identity(struct file *f, struct pmm_object *o)
{
	struct inode *inode = file_inode(f);
	struct kstat st;

	if (!vfs_getattr_nosec(pmm_file_user_path(f), &st, STATX_INO | STATX_SIZE,
			       AT_STATX_DONT_SYNC)) {
		o->dev = new_encode_dev(st.dev);
		o->ino = st.ino;
		o->size = st.size;
		return;
	}
	o->dev = new_encode_dev(inode->i_sb->s_dev);
	o->ino = inode->i_ino;
	o->size = i_size_read(inode);
}

/* o's path and build-id, from file f: may sleep on the file's I/O. */
static void object_describe(struct file *f, struct pmm_object *o)
{
	char *buf, *path;
	size_t len;

	buf = kmalloc(PATH_MAX, GFP_KERNEL);
	if (buf) {
		path = d_path(pmm_file_user_path(f), buf, PATH_MAX);
		if (!IS_ERR(path)) {
			if (d_unlinked(pmm_file_user_path(f)->dentry)) {
				o->flags |= PMM_OBJ_F_DELETED;
				len = strlen(path);
				if (len > 10 && !strcmp(path + len - 10, " (deleted)"))
					path[len - 10] = '\0';
			}
			if (strscpy(o->path, path, sizeof(o->path)) < 0)
				o->flags |= PMM_OBJ_F_PATH_CUT;
		} else if (PTR_ERR(path) == -ENAMETOOLONG) {
			o->flags |= PMM_OBJ_F_PATH_CUT;
		}
		kfree(buf);
	}
	read_build_id(f, o);
}

/* The number of the object keyed as e is, or 0: under the process's lock. */
static u32 object_find(struct pmm_proc *p, const struct pmm_obj_ent *e)
{
	u32 i;

	for (i = 0; i < p->nobjs; i++)
		if (p->objs[i]->key_ino == e->key_ino &&
		    p->objs[i]->key_dev == e->key_dev &&
		    p->objs[i]->key_gen == e->key_gen)
			return p->objs[i]->o.obj;
	return 0;
}

/* Adds e under the process's lock: its number, or 0 (retired, full). */
static u32 object_add(struct pmm_proc *p, struct pmm_obj_ent *e)
{
	struct pmm_obj_ent **objs;
	u32 cap;

	if (!p->segs || p->nobjs >= PMM_MAX_OBJECTS)
		return 0;
	if (p->nobjs == p->objs_cap) {
		cap = p->objs_cap ? 2 * p->objs_cap : 16;
		objs = pmm_krealloc_array(p->objs, cap, sizeof(*objs),
					  GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
		if (!objs)
			return 0;
		pmm_kmem_add((long)(cap - p->objs_cap) * sizeof(*objs));
		p->objs = objs;
		p->objs_cap = cap;
	}
	e->o.obj = ++p->nobjs;
	p->objs[e->o.obj - 1] = e;
	pmm_kmem_add(kmem_cache_size(pmm_obj_cache));
	return e->o.obj;
}

/*
 * The number of f's object in p, adding it when new; 0 when it cannot. A
 * new file is read (identity, path, build-id) outside the process's lock.
 * The lock is the record path's (pmm_proc_lock: this thread applies what
 * others queued meanwhile, as every holder does).
 */
static u32 object_of(struct pmm_proc *p, struct file *f)
{
	struct pmm_obj_ent key, *e;
	u32 obj;

	object_key(f, &key);
	pmm_proc_lock(p);
	obj = object_find(p, &key);
	pmm_proc_unlock(p);
	if (obj)
		return obj;
	e = kmem_cache_zalloc(pmm_obj_cache, GFP_KERNEL);
	if (!e)
		return 0;
	object_key(f, e);
	object_identity(f, &e->o);
	object_describe(f, &e->o);
	pmm_proc_lock(p);
	obj = object_find(p, e);	/* another thread's meanwhile? */
	if (!obj) {
		obj = object_add(p, e);
		if (obj)
			e = NULL;	/* the table's now */
	}
	pmm_proc_unlock(p);
	if (e)
		kmem_cache_free(pmm_obj_cache, e);
	return obj;
}

/*
 * Fills loc[0..depth) for the frames of a site the calling process (p)
 * registers: each frame's (object, file offset), or 0. Takes the mmap lock
 * and the process's lock in turn, never together.
 */
void pmm_locate_frames(struct pmm_proc *p, const u64 *frames, u32 depth,
		       u64 *loc)
{
	struct file *files[PMM_MAX_FRAMES] = {};
	struct mm_struct *mm = current->mm;
	struct vm_area_struct *vma;
	struct file *last = NULL;
	u32 i, obj = 0;

	BUILD_BUG_ON(PMM_MAX_OBJECTS >= 1ULL << (64 - PMM_LOC_OBJ_SHIFT));
	memset(loc, 0, depth * sizeof(*loc));
	if (!mm || mmap_read_lock_killable(mm))
		return;
	for (i = 0; i < depth; i++) {
		/* the call, one byte back: a noreturn call may end a mapping */
		vma = frames[i] ? pmm_vma_lookup(mm, frames[i] - 1) : NULL;
		/* files only: a device mapping's offset may be a bus address */
		if (!vma || !vma->vm_file ||
		    (vma->vm_flags & (VM_IO | VM_PFNMAP)) ||
		    !S_ISREG(file_inode(vma->vm_file)->i_mode))
			continue;
		loc[i] = frames[i] - vma->vm_start +
			 ((u64)vma->vm_pgoff << PAGE_SHIFT);
		if (loc[i] > PMM_LOC_OFFSET(~0ULL)) {
			loc[i] = 0;
			continue;
		}
		files[i] = get_file(vma->vm_file);
	}
	mmap_read_unlock(mm);
	for (i = 0; i < depth; i++) {
		if (!files[i])
			continue;
		/* frames run through few files: look up each once in a row */
		if (!last || file_inode(files[i]) != file_inode(last))
			obj = object_of(p, files[i]);
		last = files[i];
		loc[i] = obj ? ((u64)obj << PMM_LOC_OBJ_SHIFT) | loc[i] : 0;
	}
	for (i = 0; i < depth; i++)
		if (files[i])
			fput(files[i]);
}

/* The object at index (its obj - 1), or NULL: under the process's lock. */
struct pmm_object *pmm_object_at(struct pmm_proc *p, u64 index)
{
	lockdep_assert_held(&p->lock);
	return index < p->nobjs ? &p->objs[index]->o : NULL;
}

/* Frees a process's objects (its lock held, or the last put). */
void pmm_objects_free(struct pmm_proc *p)
{
	u32 i;

	for (i = 0; i < p->nobjs; i++)
		kmem_cache_free(pmm_obj_cache, p->objs[i]);
	pmm_kmem_add(-(long)(p->nobjs * kmem_cache_size(pmm_obj_cache) +
			     p->objs_cap * sizeof(*p->objs)));
	kfree(p->objs);
	p->objs = NULL;
	p->nobjs = 0;
	p->objs_cap = 0;
}
