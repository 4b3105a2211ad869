// SPDX-License-Identifier: MIT
/*
 * pktsend: offer one prebuilt Ethernet frame on an interface, paced or as fast
 * as it can, for make bench-switch (bench/switch/sender.py drives it).
 *
 * Why compiled: a Python sender writing one frame per system call tops out near
 * half a million frames a second on a slow core, below what a switch in the
 * kernel forwards; this one hands the kernel a batch of BATCH frames per
 * sendmmsg on an AF_PACKET socket (PACKET_QDISC_BYPASS where the kernel has it:
 * no qdisc, no outgoing taps), and paced it sleeps between batches, so it takes
 * no more CPU than its rate needs.
 *
 * It knows nothing of the frame: the Python side builds it (the wire format is
 * defined once, in distcache/wire.py) and sends it as hex.
 *
 * Usage: pktsend IFACE
 * It prints one JSON line once its socket is bound:
 *   {"ready": true, "iface": "bpt3", "ifindex": 5, "qdisc_bypass": true, "batch": 64}
 * then reads requests from stdin, one a line:
 *   RATE SECONDS COUNT HEXFRAME
 * RATE frames/s (0: as fast as it can), SECONDS the longest it runs, COUNT the
 * most frames it offers (0: no limit), and answers each with one JSON line:
 *   {"sent": N, "errors": N, "seconds": S}
 * sent: frames the kernel took; errors: frames it refused (ENOBUFS/EAGAIN: the
 * device's queue or the peer's backlog was full), each counted as offered
 * once and not retried.  Paced, a backlog of more than 20 ms (the process was
 * descheduled) is dropped rather than sent as one burst.  It exits at the end
 * of its input; a bad request or a socket error ends it with one line on
 * stderr and exit status 1 (2: bad usage).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAX_FRAME 9216
#define LAG_SECONDS 0.02  /* a paced backlog longer than this is forgiven, not burst */
#define MAX_SLEEP_NS 200000L

static void die(const char *what) {
	fprintf(stderr, "pktsend: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int hexval(int c) {
	if (c >= '0' && c <= '9') return c - '0';
	if (c >= 'a' && c <= 'f') return c - 'a' + 10;
	if (c >= 'A' && c <= 'F') return c - 'A' + 10;
	return -1;
}

/* The frame's length, or -1 when hex is not an even number of hex digits of 14..MAX_FRAME bytes. */
static long unhex(const char *hex, unsigned char *out) {
	size_t n = strlen(hex);
	if (n % 2 || n / 2 < 14 || n / 2 > MAX_FRAME) return -1;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return (long)(n / 2);
}

struct result {
	unsigned long long sent, errors;
	double seconds;
};

/* Offer the frame at rate (0: flat out) until seconds pass or count frames were offered (0: no limit). */
static struct result offer(int fd, unsigned char *frame, size_t len, double rate, double seconds,
                           unsigned long long count) {
	struct iovec iov = {.iov_base = frame, .iov_len = len};
	struct mmsghdr msgs[BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < BATCH; i++) {
		msgs[i].msg_hdr.msg_iov = &iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	struct result r = {0, 0, 0};
	unsigned long long forgiven = 0; /* frames the pacing dropped from its backlog */
	unsigned long long lag = rate > 0 ? (unsigned long long)(rate * LAG_SECONDS) : 0;
	if (lag < BATCH) lag = BATCH;
	double t0 = now(), t = t0;
	while ((t = now()) < t0 + seconds) {
		unsigned long long done = r.sent + r.errors;
		if (count && done >= count) break;
		unsigned long long want = BATCH;
		if (rate > 0) {
			double due_total = (t - t0) * rate;
			unsigned long long due = due_total > (double)(done + forgiven) ? (unsigned long long)due_total - done - forgiven : 0;
			if (due > lag) {
				forgiven += due - BATCH;
				due = BATCH;
			}
			if (due == 0) {
				double next = t0 + (double)(done + forgiven + 1) / rate;
				long ns = (long)((next - t) * 1e9);
				if (ns > MAX_SLEEP_NS) ns = MAX_SLEEP_NS;
				if (ns > 0) {
					struct timespec ts = {0, ns};
					nanosleep(&ts, NULL);
				}
				continue;
			}
			want = due < BATCH ? due : BATCH;
		}
		if (count && want > count - done) want = count - done;
		int n = sendmmsg(fd, msgs, (unsigned int)want, 0);
		if (n < 0) {
			if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR) die("sendmmsg");
			if (errno != EINTR) r.errors++; /* the first frame of the batch was refused */
			continue;
		}
		r.sent += (unsigned long long)n;
	}
	r.seconds = now() - t0;
	return r;
}

int main(int argc, char **argv) {
	if (argc != 2 || argv[1][0] == '-') {
		fprintf(stderr, "usage: pktsend IFACE  (requests on stdin: RATE SECONDS COUNT HEXFRAME)\n");
		return 2;
	}
	unsigned int ifindex = if_nametoindex(argv[1]);
	if (!ifindex) die(argv[1]);
	int fd = socket(AF_PACKET, SOCK_RAW, 0); /* protocol 0: this socket receives nothing */
	if (fd < 0) die("socket(AF_PACKET) (root needed)");
	int sndbuf = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0 &&
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
		die("SO_SNDBUF");
	int one = 1;
	int bypass = setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) == 0;
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = 0, .sll_ifindex = (int)ifindex};
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) die("bind");
	printf("{\"ready\": true, \"iface\": \"%s\", \"ifindex\": %u, \"qdisc_bypass\": %s, \"batch\": %d}\n", argv[1],
	       ifindex, bypass ? "true" : "false", BATCH);
	fflush(stdout);

	static char line[2 * MAX_FRAME + 128];
	static char hex[2 * MAX_FRAME + 2];
	static unsigned char frame[MAX_FRAME];
	while (fgets(line, sizeof(line), stdin)) {
		double rate, seconds;
		unsigned long long count;
		if (line[0] == '\n') continue;
		long len = -1;
		if (strchr(line, '\n') && sscanf(line, "%lf %lf %llu %18433s", &rate, &seconds, &count, hex) == 4)
			len = unhex(hex, frame);
		if (len < 0 || rate < 0 || seconds < 0) {
			fprintf(stderr, "pktsend: bad request (RATE SECONDS COUNT HEXFRAME, 14..%d bytes): %.60s\n", MAX_FRAME,
			        line);
			return 1;
		}
		struct result r = offer(fd, frame, (size_t)len, rate, seconds, count);
		printf("{\"sent\": %llu, \"errors\": %llu, \"seconds\": %.6f}\n", r.sent, r.errors, r.seconds);
		fflush(stdout);
	}
	return 0;
}
