// SPDX-License-Identifier: GPL-2.0
/* netlink_broadcast_filtered() (gone in 6.3) */
#include <linux/netlink.h>

int pmm_probe(struct sock *sk, struct sk_buff *skb);
int pmm_probe(struct sock *sk, struct sk_buff *skb)
{
	return netlink_broadcast_filtered(sk, skb, 0, 1, GFP_KERNEL, NULL, NULL);
}
