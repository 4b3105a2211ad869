// Command storagebench is make bench-shim's load generator and coherence peer (bench/shim/).
//
// One program drives both sides of the comparison at the same concurrency, each as a client on another host
// would reach it: a redis-server directly over TCP (RESP, go-redis, one command at a time per connection),
// and a storage shim over UDP (protocol v2, internal/wire; a value too large for a datagram is not used
// here). Each worker keeps one request in flight (a closed loop), over a keyspace of -keys keys, uniform or
// Zipf, with values of -min-value to -max-value bytes.
//
//	storagebench -side redis -addr 127.0.0.1:6380 -op get -keys 100000 -dist zipf -concurrency 32 -duration 3s
//	storagebench -side shim -addr 127.0.0.1:8888 -cluster cluster.json -op put ...
//	storagebench -side peer -addr 127.0.0.1:0   (reflects INVALIDATE/UPDATE as acks; prints its port)
//	storagebench -side load -addr 127.0.0.1:6380 -keys 100000   (writes every key once, pipelined)
//
// A load side prints one JSON object: ops (answered within the window), seconds, errors, timeouts, p50_us,
// p99_us, cpu_us (this process's user + system CPU over the window).
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

type options struct {
	side, addr, op, dist, cluster, keyFile, watch string
	keys, concurrency, minValue, maxValue         int
	duration, warmup, timeout                     time.Duration
	theta                                         float64
	seed                                          int64
}

func main() {
	var o options
	flag.StringVar(&o.side, "side", "", "redis, shim, peer or load")
	flag.StringVar(&o.addr, "addr", "", "the server's address (peer: where to listen)")
	flag.StringVar(&o.op, "op", "get", "get or put")
	flag.StringVar(&o.dist, "dist", "uniform", "uniform or zipf")
	flag.Float64Var(&o.theta, "theta", 0.99, "the Zipf exponent")
	flag.StringVar(&o.cluster, "cluster", "", "shim: the cluster file (its key secret)")
	flag.StringVar(&o.keyFile, "key-file", "", "the keys, hex, one per line (instead of key:<n> for n < -keys)")
	flag.IntVar(&o.keys, "keys", 100000, "keys key:000000 .. (ignored with -key-file)")
	flag.IntVar(&o.concurrency, "concurrency", 32, "requests in flight (one worker and socket or connection each)")
	flag.IntVar(&o.minValue, "min-value", 64, "the shortest value a PUT writes")
	flag.IntVar(&o.maxValue, "max-value", 128, "the longest value a PUT writes")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "the measured window")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "load before the window opens")
	flag.DurationVar(&o.timeout, "timeout", 500*time.Millisecond, "a request unanswered this long is a timeout")
	flag.Int64Var(&o.seed, "seed", 1, "the random seed")
	flag.StringVar(&o.watch, "watch", "", "pids (comma-separated) whose CPU over the window to report too")
	flag.Parse()
	if err := run(&o); err != nil {
		fmt.Fprintf(os.Stderr, "storagebench: %v\n", err)
		os.Exit(2)
	}
}

func run(o *options) error {
	if o.minValue < 0 || o.maxValue < o.minValue || o.maxValue > dc.MaxCacheable || o.concurrency < 1 {
		return fmt.Errorf("need 0 <= -min-value <= -max-value <= %d and -concurrency >= 1", dc.MaxCacheable)
	}
	keys, err := keyspace(o)
	if err != nil {
		return err
	}
	switch o.side {
	case "peer":
		return peer(o.addr)
	case "load":
		return preload(o, keys)
	case "redis", "shim":
	default:
		return fmt.Errorf("-side: %q; give redis, shim, peer or load", o.side)
	}
	if o.op != "get" && o.op != "put" {
		return fmt.Errorf("-op: %q; give get or put", o.op)
	}
	var secret []byte
	if o.side == "shim" {
		if secret, err = keySecret(o.cluster); err != nil {
			return err
		}
	}
	res := measure(o, keys, secret)
	return json.NewEncoder(os.Stdout).Encode(res)
}

func keyspace(o *options) ([][]byte, error) {
	if o.keyFile != "" {
		raw, err := os.ReadFile(o.keyFile)
		if err != nil {
			return nil, err
		}
		var keys [][]byte
		for _, line := range strings.Fields(string(raw)) { // hex keys, one per line
			k, err := hex.DecodeString(line)
			if err != nil {
				return nil, fmt.Errorf("-key-file: %v", err)
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("-key-file %s holds no key", o.keyFile)
		}
		return keys, nil
	}
	keys := make([][]byte, o.keys)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key:%06d", i))
	}
	return keys, nil
}

func keySecret(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("-cluster: %v", err)
	}
	var c struct {
		KeySecret string `json:"key_secret"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("-cluster: %v", err)
	}
	if c.KeySecret == "" {
		return []byte(dc.DevKeySecret), nil
	}
	return hex.DecodeString(c.KeySecret)
}

// picker draws key indexes from the distribution (each worker its own, seeded apart).
func picker(o *options, n int, worker int) func() int {
	r := rand.New(rand.NewSource(o.seed*7919 + int64(worker)))
	if o.dist == "zipf" {
		cdf := zipfCDF(o.theta, n)
		return func() int {
			i, _ := slices.BinarySearch(cdf, r.Float64())
			return min(i, n-1)
		}
	}
	return func() int { return r.Intn(n) }
}

var (
	cdfOnce sync.Once
	cdf     []float64
)

// zipfCDF is the cumulative distribution of key ranks 0..n-1 with P(k) ~ 1/(k+1)^theta (math/rand's Zipf
// needs an exponent over 1; the paper's workloads take 0.9-0.99), built once and shared by the workers.
func zipfCDF(theta float64, n int) []float64 {
	cdfOnce.Do(func() {
		cdf = make([]float64, n)
		total := 0.0
		for k := 0; k < n; k++ {
			total += math.Pow(float64(k+1), -theta)
			cdf[k] = total
		}
		for k := range cdf {
			cdf[k] /= total
		}
	})
	return cdf
}

type result struct {
	Ops      int64   `json:"ops"`
	Answered int64   `json:"answered"` // every request answered, the warm-up's too (what reached the server)
	Seconds  float64 `json:"seconds"`
	Errors   int64   `json:"errors"`
	Timeouts int64   `json:"timeouts"`
	P50us    float64 `json:"p50_us"`
	P99us    float64 `json:"p99_us"`
	CPUus    float64 `json:"cpu_us"`
	// the CPU each watched process spent over the same window (pid -> microseconds)
	Watched map[string]float64 `json:"watched"`
}

// procCPU is a process's user + system CPU from /proc/PID/stat (clock ticks of 10 ms on Linux).
func procCPU(pid string) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(fields))
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond, nil
}

func watchedCPU(pids []string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range pids {
		if c, err := procCPU(p); err == nil {
			out[p] = c
		}
	}
	return out
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func value(r *rand.Rand, o *options) []byte {
	v := make([]byte, o.minValue+r.Intn(o.maxValue-o.minValue+1))
	r.Read(v)
	return v
}

func measure(o *options, keys [][]byte, secret []byte) result {
	var digests [][dc.DigestLen]byte
	if secret != nil {
		digests = make([][dc.DigestLen]byte, len(keys))
		for i, k := range keys {
			digests[i] = wire.KeyDigest(k, secret)
		}
	}
	start := time.Now().Add(o.warmup)
	end := start.Add(o.duration)
	var ops, answered, errs, timeouts atomic.Int64
	lat := make([][]time.Duration, o.concurrency)
	var cpuStart time.Duration
	var watchStart map[string]time.Duration
	var pids []string
	if o.watch != "" {
		pids = strings.Split(o.watch, ",")
	}
	var once sync.Once
	var wg sync.WaitGroup
	var rdb *redis.Client
	if o.side == "redis" {
		rdb = redis.NewClient(&redis.Options{Addr: o.addr, PoolSize: o.concurrency, MinIdleConns: o.concurrency,
			ReadTimeout: o.timeout, WriteTimeout: o.timeout, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
		defer rdb.Close()
	}
	for w := 0; w < o.concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pick := picker(o, len(keys), w)
			r := rand.New(rand.NewSource(o.seed + int64(w)))
			var do func(i int) error
			if o.side == "redis" {
				ctx := context.Background()
				do = func(i int) error {
					if o.op == "get" {
						err := rdb.Get(ctx, string(keys[i])).Err()
						if err == redis.Nil {
							return nil
						}
						return err
					}
					return rdb.Set(ctx, string(keys[i]), value(r, o), 0).Err()
				}
			} else {
				do = shimWorker(o, keys, digests, r, w)
			}
			for {
				now := time.Now()
				if now.After(end) {
					return
				}
				if !now.Before(start) {
					once.Do(func() { cpuStart, watchStart = cpuNow(), watchedCPU(pids) })
				}
				err := do(pick())
				took := time.Since(now)
				if err == nil {
					answered.Add(1)
				}
				if now.Before(start) {
					continue
				}
				switch {
				case err == errTimeout:
					timeouts.Add(1)
				case err != nil:
					errs.Add(1)
				default:
					ops.Add(1)
					lat[w] = append(lat[w], took)
				}
			}
		}()
	}
	wg.Wait()
	cpu := cpuNow() - cpuStart
	watched := map[string]float64{}
	for p, c := range watchedCPU(pids) {
		watched[p] = float64((c - watchStart[p]).Nanoseconds()) / 1000
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(p*float64(len(all)-1))].Nanoseconds()) / 1000
	}
	return result{Ops: ops.Load(), Answered: answered.Load(), Seconds: o.duration.Seconds(), Errors: errs.Load(), Timeouts: timeouts.Load(),
		P50us: pct(0.50), P99us: pct(0.99), CPUus: float64(cpu.Nanoseconds()) / 1000, Watched: watched}
}

var errTimeout = fmt.Errorf("timeout")

type statusError struct{ status dc.Status }

func (e statusError) Error() string { return e.status.String() }

// shimWorker sends one request at a time on a socket of its own and waits for the reply with its seq.
func shimWorker(o *options, keys [][]byte, digests [][dc.DigestLen]byte, r *rand.Rand, w int) func(int) error {
	conn, err := net.Dial("udp4", o.addr)
	if err != nil {
		return func(int) error { return err }
	}
	seq := uint64(w)<<40 | uint64(time.Now().UnixNano()&0xFFFFFFFFFF)
	buf := make([]byte, 0, 2048)
	in := make([]byte, 65536)
	return func(i int) error {
		seq++
		m := wire.Message{Op: dc.OpGet, Seq: seq, Digest: digests[i], Key: keys[i]}
		if o.op == "put" {
			m.Op, m.Value = dc.OpPut, value(r, o)
		}
		out, err := m.Append(buf[:0])
		if err != nil {
			return err
		}
		if _, err := conn.Write(out); err != nil {
			return err
		}
		deadline := time.Now().Add(o.timeout)
		for {
			_ = conn.SetReadDeadline(deadline)
			n, err := conn.Read(in)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					return errTimeout
				}
				return err
			}
			if n < dc.HeaderLen || binary.BigEndian.Uint64(in[dc.OffSeq:]) != seq {
				continue // a late reply to an earlier request
			}
			switch st := dc.Status(in[dc.OffStatus]); st {
			case dc.StatusOk, dc.StatusNotFound:
				return nil
			default:
				return statusError{st}
			}
		}
	}
}

// peer plays the switches for the shim: it reflects every INVALIDATE and UPDATE as its acknowledgement.
func peer(addr string) error {
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return err
	}
	fmt.Printf("peer ready %s\n", pc.LocalAddr())
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if n < dc.HeaderLen {
			continue
		}
		switch dc.Op(buf[dc.OffOp]) {
		case dc.OpInvalidate, dc.OpUpdate:
			buf[dc.OffOp] |= 0x80
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}
}

// preload writes every key once, pipelined, so GETs find values.
func preload(o *options, keys [][]byte) error {
	rdb := redis.NewClient(&redis.Options{Addr: o.addr, Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	r := rand.New(rand.NewSource(o.seed))
	ctx := context.Background()
	for at := 0; at < len(keys); at += 1000 {
		pipe := rdb.Pipeline()
		for _, k := range keys[at:min(len(keys), at+1000)] {
			pipe.Set(ctx, string(k), value(r, o), 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	fmt.Printf("{\"loaded\": %d}\n", len(keys))
	return nil
}
