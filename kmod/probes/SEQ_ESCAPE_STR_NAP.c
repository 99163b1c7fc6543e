// SPDX-License-Identifier: GPL-2.0
/* seq_escape_str() with ESCAPE_NAP and ESCAPE_APPEND (5.13) */
#include <linux/seq_file.h>
#include <linux/string_helpers.h>

void pmm_probe(struct seq_file *m);
void pmm_probe(struct seq_file *m)
{
	seq_escape_str(m, "x", ESCAPE_OCTAL | ESCAPE_NAP | ESCAPE_APPEND, "\\");
}
