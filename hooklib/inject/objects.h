/* SPDX-License-Identifier: GPL-2.0 */
/*
 * objects.c: the target's objects, read from its maps and memory: the code
 * a safe point must avoid, the program's own, and libc's dl* functions.
 */
#ifndef PMM_INJECT_OBJECTS_H
#define PMM_INJECT_OBJECTS_H

#include "target.h"

/* t's deny and plain ranges and libc's dl* functions, from its maps and
 * the objects' .dynsym; dies if it has no dynamic loader. */
void scan_objects(struct target *t);

#endif /* PMM_INJECT_OBJECTS_H */
