// SPDX-License-Identifier: GPL-2.0
/* GENL_MCAST_CAP_NET_ADMIN: a multicast group refuses a join without it (6.6, in 6.1.y) */
#include <net/genetlink.h>

unsigned int pmm_probe(void);
unsigned int pmm_probe(void)
{
	static const struct genl_multicast_group g = {
		.name = "x",
		.flags = GENL_MCAST_CAP_NET_ADMIN,
	};

	return g.flags;
}
