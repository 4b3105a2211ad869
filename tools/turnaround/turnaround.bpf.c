// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * The ceiling of make bench-switch's veths: a tc clsact ingress program that
 * only turns a read around, attached in place of a switch (bench/switch/limit.py
 * loads it on the switch-side end of the input veth).
 *
 * Each Ethernet/IPv4/UDP frame gets its MAC addresses, IPv4 addresses and UDP
 * ports swapped, as a reply to it would carry them (the IPv4 and UDP checksums
 * stay valid: both are sums in which the swapped fields appear symmetrically),
 * and is redirected out of the interface in cfg[0] -- the port a cache hit's
 * reply leaves by -- so it crosses the same veths as a real hit.  Nothing else
 * is read or written: no table, no register, no checksum.  Other frames pass.
 *
 * Maps (user space writes cfg and reads counts with bpftool, the object being
 * loaded with bpftool prog loadall ... pinmaps DIR):
 *   cfg    [0] = ifindex the turned frames leave by (0: nothing is turned)
 *   counts per-CPU [0] = frames turned, [1] = frames passed
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline int count(__u32 i, int verdict) {
	__u64 *c = bpf_map_lookup_elem(&counts, &i);
	if (c)
		*c += 1;
	return verdict;
}

SEC("tc")
int turnaround(struct __sk_buff *skb) {
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u32 zero = 0;
	__u32 *out = bpf_map_lookup_elem(&cfg, &zero);
	if (!out || !*out || (void *)(ip + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP)
		return count(1, TC_ACT_OK);
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return count(1, TC_ACT_OK);
	unsigned char mac[ETH_ALEN];
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	__be32 addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	__be16 port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	count(0, 0);
	return bpf_redirect(*out, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
