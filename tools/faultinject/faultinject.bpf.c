// SPDX-License-Identifier: (GPL-2.0-only OR MIT)
/*
 * Packet faults on a network interface, for DistCache's fault matrix.
 *
 * Why here and not netem: the kernel the project runs on has no sch_netem (nor
 * sch_fq, so no Earliest-Departure-Time hold-back either), and softswitch's own
 * --egress-loss cannot reach BMv2.  A tc clsact program sees every frame a
 * switch sends, whatever the switch: BMv2 and softswitch both transmit through
 * packet sockets, whose frames pass the egress hook of the port.  (Frames a
 * switch receives are not affected by an ingress program: packet sockets see a
 * frame before the ingress hook runs.  Attach to the egress of both ends of a
 * link to fault both directions.)
 *
 * Two programs, one per direction, share the maps of one loaded instance; the
 * Python side (mininet/dcnet/netfaults.py) loads one instance per interface and
 * pins it under /sys/fs/bpf/dcfaults-*.  Every map has one entry per direction
 * (0 = ingress, 1 = egress).
 *
 * Faults, applied to the frames that match the configured class (every IPv4
 * frame; UDP to or from a port; or that UDP with its DistCache op byte in a
 * bitmap -- the port and the op codes come from distcache/wire.py):
 *   - loss bursts: a matching frame starts a burst with probability burst_p and
 *     it and the next burst_len - 1 matching frames are dropped (user space can
 *     also start one at once by writing dc_ctl);
 *   - drops with probability drop_p;
 *   - hold-back (reordering): the frame is copied into dc_hold and dropped; it is
 *     sent again right after the hold_distance-th later matching frame, which
 *     thereby overtakes it (or, after hold_max_ns, after any later IPv4 frame);
 *   - replay: the same, but the frame also goes out at once: a late duplicate;
 *   - duplication: bpf_clone_redirect, a second copy now.
 * Where copies go (duplicates, and the frame that overtakes a held one): on
 * egress, with copy_ifindex set, straight into the ingress of the veth peer, as
 * if sent over the link.  That matters on a switch's port: a copy transmitted on
 * the port itself passes the port's packet taps as an outgoing frame of another
 * socket, and BMv2 (which does not filter the direction) would take it for a
 * frame received.  Otherwise (and always on ingress) the copy goes to the same
 * interface and direction, carrying CLONE_MARK in skb->mark while it passes this
 * hook again, so it is neither faulted nor counted twice.
 *
 * Counters count effects, not attempts: a frame counts as duplicated only when
 * its clone was handed to the device, as reordered only when it was sent after
 * a later frame, and so on.
 *
 * Randomness: bpf_get_prandom_u32, or with a non-zero seed a SplitMix64 hash of
 * (seed, the frame's index among matching frames, the fault): then the faults
 * applied to the n-th matching frame of a direction are a function of the seed
 * alone.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define HOLD_MAX 1536          /* longest frame that can be held back (MTU 1500 + Ethernet) */
#define CLONE_MARK 0xdcfa017fu /* skb->mark of our own copies while they pass the hook again */

enum dc_dir { DIR_INGRESS = 0, DIR_EGRESS = 1, DIR_N = 2 };
enum dc_match { MATCH_IPV4 = 0, MATCH_UDP_PORT = 1 };
enum dc_hold_state { HOLD_EMPTY = 0, HOLD_BUSY = 1, HOLD_FULL = 2 };

/* Written by user space as a whole (netfaults.FaultConfig.pack follows this layout). */
struct dc_cfg {
	__u32 enabled;       /* 0: every frame passes untouched and uncounted */
	__u32 match;         /* enum dc_match */
	__u32 port;          /* UDP port (host order), source or destination */
	__u32 use_ops;       /* 1: the DistCache op byte must be set in ops */
	__u32 ops[8];        /* bitmap of the 256 op codes */
	__u64 seed;          /* 0: kernel PRNG; otherwise deterministic per matching frame */
	__u64 drop_p;        /* probabilities as thresholds out of 2^32 (2^32 = always) */
	__u64 burst_p;
	__u64 dup_p;
	__u64 hold_p;
	__u64 replay_p;
	__u32 burst_len;     /* frames a burst drops, the first included */
	__u32 hold_distance; /* later matching frames that overtake a held one (0 counts as 1) */
	__u64 hold_max_ns;   /* after this, any IPv4 frame releases a held one (0: only matching frames) */
	__u32 copy_ifindex;  /* egress: deliver copies into the ingress of this interface (the veth peer), 0: here */
	__u32 pad;
};

enum dc_stat {
	ST_MATCHED,       /* frames of the configured class that reached the program */
	ST_DROPPED,       /* dropped by drop_p */
	ST_BURST_DROPPED, /* dropped inside a loss burst */
	ST_BURSTS,        /* loss bursts that dropped at least one frame */
	ST_DUPLICATED,    /* second copies handed to the device */
	ST_HELD,          /* frames taken off the wire for hold-back */
	ST_REORDERED,     /* held frames sent after a later matching frame */
	ST_DELAYED,       /* held frames sent after hold_max_ns, behind a non-matching frame */
	ST_REPLAYED,      /* late copies of frames that had already been sent */
	ST_ERRORS,        /* a helper failed; the frame concerned was dropped or sent unchanged */
	ST_N,
};

struct dc_stats {
	__u64 n[ST_N];
};

/* Written by user space to start a loss burst now (fresh = 1: count it once it drops a frame). */
struct dc_ctl {
	__s32 burst_left;
	__u32 fresh;
};

struct dc_hold {
	__u32 state;     /* enum dc_hold_state, changed atomically */
	__u32 remaining; /* matching frames still to overtake it */
	__u32 len;
	__u32 replay;    /* 1: a late copy of a frame that was sent */
	__u64 since_ns;
	__u8 data[HOLD_MAX];
};

struct dc_frame {
	__u8 data[HOLD_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_N);
	__type(key, __u32);
	__type(value, struct dc_cfg);
} dc_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_N);
	__type(key, __u32);
	__type(value, struct dc_stats);
} dc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_N);
	__type(key, __u32);
	__type(value, struct dc_ctl);
} dc_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DIR_N);
	__type(key, __u32);
	__type(value, struct dc_hold);
} dc_hold SEC(".maps");

/* Ingress release keeps the carrier frame here while the held one is cloned out. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dc_frame);
} dc_scratch SEC(".maps");

static __always_inline void count(struct dc_stats *s, int which)
{
	__sync_fetch_and_add(&s->n[which], 1);
}

static __always_inline __u32 draw(const struct dc_cfg *c, __u64 idx, __u64 salt)
{
	__u64 z;

	if (!c->seed)
		return bpf_get_prandom_u32();
	z = c->seed + idx * 0x9E3779B97F4A7C15ULL + salt * 0xD1B54A32D192ED03ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	z ^= z >> 31;
	return (__u32)(z >> 32);
}

static __always_inline int chance(const struct dc_cfg *c, __u64 p, __u64 idx, __u64 salt)
{
	if (!p)
		return 0;
	if (p >= (1ULL << 32))
		return 1;
	return (__u64)draw(c, idx, salt) < p;
}

/* 1 if the frame is of the configured class; *ipv4 tells whether it is IPv4 at all. */
static __always_inline int classify(struct __sk_buff *skb, const struct dc_cfg *c, int *ipv4)
{
	struct iphdr iph;
	struct udphdr uh;
	__be16 proto;
	__u32 l4;
	__u8 op;

	if (bpf_skb_load_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, sizeof(proto)))
		return 0;
	if (proto != bpf_htons(ETH_P_IP) || skb->protocol != bpf_htons(ETH_P_IP))
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &iph, sizeof(iph)) || iph.version != 4 || iph.ihl < 5)
		return 0;
	*ipv4 = 1;
	if (c->match == MATCH_IPV4)
		return 1;
	if (iph.protocol != IPPROTO_UDP || (iph.frag_off & bpf_htons(0x1fff)))
		return 0;
	l4 = ETH_HLEN + iph.ihl * 4;
	if (bpf_skb_load_bytes(skb, l4, &uh, sizeof(uh)))
		return 0;
	if (uh.source != bpf_htons(c->port) && uh.dest != bpf_htons(c->port))
		return 0;
	if (!c->use_ops)
		return 1;
	if (bpf_skb_load_bytes(skb, l4 + sizeof(uh) + 1, &op, 1))
		return 0;
	return (c->ops[(op >> 5) & 7] >> (op & 31)) & 1;
}

/* A copy of the frame, sent before this one; 0 when handed over. */
static __always_inline long copy_out(struct __sk_buff *skb, const struct dc_cfg *c, __u32 dir)
{
	__u32 mark = skb->mark;
	long r;

	if (dir == DIR_EGRESS && c->copy_ifindex)
		return bpf_clone_redirect(skb, c->copy_ifindex, BPF_F_INGRESS);
	skb->mark = CLONE_MARK;
	r = bpf_clone_redirect(skb, skb->ifindex, dir == DIR_INGRESS ? BPF_F_INGRESS : 0);
	skb->mark = mark;
	return r;
}

/* Replace the frame's bytes with len bytes of buf. */
static __always_inline int put_frame(struct __sk_buff *skb, const __u8 *buf, __u32 len)
{
	if (len < ETH_HLEN || len > HOLD_MAX)
		return -1;
	if (bpf_skb_change_tail(skb, len, 0))
		return -1;
	return bpf_skb_store_bytes(skb, 0, buf, len, BPF_F_RECOMPUTE_CSUM | BPF_F_INVALIDATE_HASH) ? -1 : 0;
}

/* Keep a copy of the frame in the hold slot; 1 if taken. */
static __always_inline int hold(struct __sk_buff *skb, const struct dc_cfg *c, struct dc_hold *h, __u32 replay)
{
	__u32 len = skb->len;

	if (len < ETH_HLEN || len > HOLD_MAX || skb->gso_segs > 1)
		return 0;
	if (__sync_val_compare_and_swap(&h->state, HOLD_EMPTY, HOLD_BUSY) != HOLD_EMPTY)
		return 0;
	if (bpf_skb_load_bytes(skb, 0, h->data, len)) {
		__sync_lock_test_and_set(&h->state, HOLD_EMPTY);
		return 0;
	}
	h->len = len;
	h->replay = replay;
	h->remaining = c->hold_distance ? c->hold_distance : 1;
	h->since_ns = bpf_ktime_get_ns();
	__sync_lock_test_and_set(&h->state, HOLD_FULL);
	return 1;
}

/*
 * Send the held frame right after this one (the carrier).  Egress: a clone of
 * the carrier leaves first, then this skb, rewritten into the held frame.
 * Ingress: the clone is queued to the backlog and this skb goes up first, so
 * the clone is the held frame and this skb is restored to the carrier.
 */
static __always_inline int release(struct __sk_buff *skb, const struct dc_cfg *c, struct dc_hold *h,
				   struct dc_stats *s, __u32 dir, int overtaken)
{
	__u32 key = 0, len, blen = skb->len;
	struct dc_frame *scratch;

	if (skb->gso_segs > 1 || (dir == DIR_INGRESS && (blen < ETH_HLEN || blen > HOLD_MAX))) {
		h->remaining = 1; /* cannot carry: the next matching frame tries again */
		return TC_ACT_OK;
	}
	if (__sync_val_compare_and_swap(&h->state, HOLD_FULL, HOLD_BUSY) != HOLD_FULL)
		return TC_ACT_OK;
	len = h->len;
	if (dir == DIR_EGRESS) {
		if (copy_out(skb, c, dir)) {
			count(s, ST_ERRORS);
			h->remaining = 1;
			__sync_lock_test_and_set(&h->state, HOLD_FULL);
			return TC_ACT_OK;
		}
		if (put_frame(skb, h->data, len)) {
			/* the carrier went out as the clone; the held frame is lost */
			count(s, ST_ERRORS);
			__sync_lock_test_and_set(&h->state, HOLD_EMPTY);
			return TC_ACT_SHOT;
		}
	} else {
		scratch = bpf_map_lookup_elem(&dc_scratch, &key);
		if (!scratch || bpf_skb_load_bytes(skb, 0, scratch->data, blen)) {
			count(s, ST_ERRORS);
			h->remaining = 1;
			__sync_lock_test_and_set(&h->state, HOLD_FULL);
			return TC_ACT_OK;
		}
		if (put_frame(skb, h->data, len) || copy_out(skb, c, dir)) {
			count(s, ST_ERRORS);
			__sync_lock_test_and_set(&h->state, HOLD_EMPTY);
			return put_frame(skb, scratch->data, blen) ? TC_ACT_SHOT : TC_ACT_OK;
		}
		if (put_frame(skb, scratch->data, blen)) {
			/* the held frame went out as the clone; the carrier is lost */
			count(s, ST_ERRORS);
			__sync_lock_test_and_set(&h->state, HOLD_EMPTY);
			return TC_ACT_SHOT;
		}
	}
	if (h->replay)
		count(s, ST_REPLAYED);
	else
		count(s, overtaken ? ST_REORDERED : ST_DELAYED);
	__sync_lock_test_and_set(&h->state, HOLD_EMPTY);
	return TC_ACT_OK;
}

/* 1 if a loss burst under way takes this frame. */
static __always_inline int in_burst(struct dc_ctl *ctl)
{
	__s32 left;

	for (int i = 0; i < 8; i++) {
		left = ctl->burst_left;
		if (left <= 0)
			return 0;
		if (__sync_val_compare_and_swap(&ctl->burst_left, left, left - 1) == left)
			return 1;
	}
	return 0;
}

static __always_inline int fault(struct __sk_buff *skb, __u32 dir)
{
	struct dc_stats *s;
	struct dc_hold *h;
	struct dc_ctl *ctl;
	struct dc_cfg *c;
	__u32 key = dir;
	int ipv4 = 0;
	__u64 idx;

	if (skb->mark == CLONE_MARK) {
		skb->mark = 0;
		return TC_ACT_OK;
	}
	c = bpf_map_lookup_elem(&dc_cfg, &key);
	s = bpf_map_lookup_elem(&dc_stats, &key);
	h = bpf_map_lookup_elem(&dc_hold, &key);
	ctl = bpf_map_lookup_elem(&dc_ctl, &key);
	if (!c || !s || !h || !ctl || !c->enabled)
		return TC_ACT_OK;

	if (!classify(skb, c, &ipv4)) {
		if (ipv4 && c->hold_max_ns && h->state == HOLD_FULL &&
		    bpf_ktime_get_ns() - h->since_ns > c->hold_max_ns)
			return release(skb, c, h, s, dir, 0);
		return TC_ACT_OK;
	}
	idx = __sync_fetch_and_add(&s->n[ST_MATCHED], 1);

	if (in_burst(ctl)) {
		if (ctl->fresh && __sync_lock_test_and_set(&ctl->fresh, 0))
			count(s, ST_BURSTS);
		count(s, ST_BURST_DROPPED);
		return TC_ACT_SHOT;
	}
	if (c->burst_len && chance(c, c->burst_p, idx, 1)) {
		__sync_lock_test_and_set(&ctl->burst_left, (__s32)c->burst_len - 1);
		count(s, ST_BURSTS);
		count(s, ST_BURST_DROPPED);
		return TC_ACT_SHOT;
	}
	if (chance(c, c->drop_p, idx, 2)) {
		count(s, ST_DROPPED);
		return TC_ACT_SHOT;
	}
	if (h->state == HOLD_FULL && __sync_fetch_and_add(&h->remaining, -1) <= 1)
		return release(skb, c, h, s, dir, 1);
	if (chance(c, c->hold_p, idx, 3) && hold(skb, c, h, 0)) {
		count(s, ST_HELD);
		return TC_ACT_SHOT;
	}
	if (chance(c, c->replay_p, idx, 4))
		hold(skb, c, h, 1);
	if (chance(c, c->dup_p, idx, 5) && copy_out(skb, c, dir) == 0)
		count(s, ST_DUPLICATED);
	return TC_ACT_OK;
}

SEC("tc")
int dc_fault_ingress(struct __sk_buff *skb)
{
	return fault(skb, DIR_INGRESS);
}

SEC("tc")
int dc_fault_egress(struct __sk_buff *skb)
{
	return fault(skb, DIR_EGRESS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
