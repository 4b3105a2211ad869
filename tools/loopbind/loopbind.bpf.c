// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * Keep a switch's own TCP servers on loopback: cgroup sock_addr programs that turn
 * a bind to every address (0.0.0.0, ::) by a process of the cgroup they are attached
 * to into a bind to the loopback address (127.0.0.1, ::1).
 *
 * Why: BMv2's Thrift server (its debug CLI, --thrift-port) has no address option and
 * listens on every interface, the machine's real ones included; the deployment puts
 * every BMv2 process into a cgroup with these programs attached
 * (mininet/dcnet/loopbind.py), so the server is reachable from this host only.  The
 * P4Runtime server is given 127.0.0.1 already; packet I/O is AF_PACKET (no bind of
 * an IP address).  A bind to a specific address, UDP, and every other socket pass as
 * they are.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("cgroup/bind4")
int loopbind4(struct bpf_sock_addr *ctx)
{
	if (ctx->type == 1 /* SOCK_STREAM */ && ctx->user_ip4 == 0)
		ctx->user_ip4 = bpf_htonl(0x7f000001);
	return 1; /* allow the bind */
}

SEC("cgroup/bind6")
int loopbind6(struct bpf_sock_addr *ctx)
{
	if (ctx->type == 1 /* SOCK_STREAM */ && ctx->user_ip6[0] == 0 && ctx->user_ip6[1] == 0 &&
	    ctx->user_ip6[2] == 0 && ctx->user_ip6[3] == 0)
		ctx->user_ip6[3] = bpf_htonl(1);
	return 1;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
