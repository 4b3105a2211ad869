package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"distcache/internal/dc"
)

// Options are the shim's command line (the Python shim's, flag for flag).
type Options struct {
	Cluster, ServerName, Listen, RedisURL, RedisUser, RedisPasswordFile, Control, StateFile string
	CoherencePeer, LogFile, LogLevel, CPUProfile                                            string
	Port, BatchWorkers, Procs                                                               int
	Fresh                                                                                   bool
	DedupMemory, StreamBudget, MaxValue                                                     int64
	DedupSpan, StreamStall, StreamIdle                                                      time.Duration
}

var sizeRE = regexp.MustCompile(`^\s*(\d+)\s*([kmg]b?|b)?\s*$`)

// parseSize reads a size as redis.conf writes one: 1048576, 64mb, 1gb, 500k (k, m, g: powers of 1000; kb,
// mb, gb: of 1024), as distcache/cmdline.py's memory_size does.
func parseSize(text string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.ToLower(text))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size: write e.g. 65536, 500kb, 64mb or 1gb", text)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is too large a size", text)
	}
	units := map[string]int64{"": 1, "b": 1, "k": 1000, "kb": 1 << 10, "m": 1000 * 1000, "mb": 1 << 20,
		"g": 1000 * 1000 * 1000, "gb": 1 << 30}
	return n * units[m[2]], nil
}

type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}
func (f sizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err == nil {
		*f.v = n
	}
	return err
}

// usageError is a bad command line: one line, then exit status 2 (argparse's convention).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parseOptions(args []string) (*Options, error) {
	o := &Options{DedupMemory: dc.DedupMemory, StreamBudget: dc.StreamBudget, MaxValue: dc.MaxValue}
	fs := flag.NewFlagSet("distcache-shim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a bad flag is one line (run prints it); -h prints the usage to stdout
	fs.Usage = func() {}
	fs.StringVar(&o.Cluster, "cluster", "", "cluster.json of the deployment (required)")
	fs.StringVar(&o.ServerName, "server", "", "this storage server's name in the cluster, e.g. r0s0 (required)")
	fs.StringVar(&o.Listen, "listen", "", "address to serve DistCache on (default: the server's address)")
	fs.IntVar(&o.Port, "port", dc.DCPort, "port of the datagram and stream paths (0: one both have free)")
	fs.IntVar(&o.BatchWorkers, "batch-workers", batchWorkers, "goroutines that read datagrams in batches, each "+
		"with one Redis round trip at a time (fewer: bigger batches, less CPU per request; more: lower latency)")
	fs.IntVar(&o.Procs, "procs", 0, "processors the shim's goroutines run on at once (GOMAXPROCS; default: one "+
		"per batch worker, or $GOMAXPROCS when set): the datagram path is its batch workers', and more processors "+
		"than busy goroutines only add the scheduler's wake-ups to every request (docs/performance.md)")
	fs.StringVar(&o.RedisURL, "redis-url", "", "e.g. unix:///run/redis.sock or redis://127.0.0.1:6379 (required)")
	fs.StringVar(&o.RedisUser, "redis-user", "", "the Redis ACL user to log in as (default: Redis' default)")
	fs.StringVar(&o.RedisPasswordFile, "redis-password-file", "", "a file holding --redis-user's password")
	fs.StringVar(&o.Control, "control", "", "control channel: unix:/path or tcp:host:port (required)")
	fs.StringVar(&o.StateFile, "state-file", "", "where the shim keeps the controller's partition across restarts")
	fs.StringVar(&o.CoherencePeer, "coherence-peer", "", "HOST:PORT: send every coherence packet here instead "+
		"of the spines' addresses (benchmarks and tests on loopback, where a peer reflects them as acks)")
	fs.BoolVar(&o.Fresh, "fresh", false, "the deployment's switches were just started and cache nothing")
	fs.Var(sizeFlag{&o.DedupMemory}, "dedup-memory", "memory for the writes remembered for the retry span "+
		"(e.g. 64mb; about 320 B each): past it new writes are refused BUSY (default 64mb)")
	fs.Var(sizeFlag{&o.StreamBudget}, "stream-budget", "memory for the stream path's requests and replies in "+
		"flight (default 256mb): past it a request is answered BUSY unread")
	fs.Var(sizeFlag{&o.MaxValue}, "max-value", "the longest value a client may store (default and most: 512mb)")
	fs.DurationVar(&o.DedupSpan, "dedup-span", time.Duration(dc.RetrySpanSeconds*float64(time.Second)),
		"how long a write is remembered (tests only: clients' retries must fall within it)")
	fs.DurationVar(&o.StreamStall, "stream-stall", streamStall, "how long a stream frame's body (or a reply "+
		"being written) may go without progress before the connection is closed")
	fs.DurationVar(&o.StreamIdle, "stream-idle", streamIdle, "how long a stream connection may wait between frames")
	fs.StringVar(&o.LogFile, "log-file", "", "log here instead of stderr")
	fs.StringVar(&o.LogLevel, "log-level", "info", "debug, info, warning or error")
	fs.StringVar(&o.CPUProfile, "cpu-profile", "", "write a pprof CPU profile of the run here (go tool pprof)")
	breakFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Println("usage: distcache-shim --cluster C --server NAME --redis-url URL --control ADDR [options]")
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	for _, req := range [][2]string{{"cluster", o.Cluster}, {"server", o.ServerName}, {"redis-url", o.RedisURL},
		{"control", o.Control}} {
		if req[1] == "" {
			return nil, usageError{fmt.Sprintf("--%s is required", req[0])}
		}
	}
	if o.Listen != "" && net.ParseIP(o.Listen) == nil {
		return nil, usageError{fmt.Sprintf("--listen: %q is not an IP address", o.Listen)}
	}
	if o.BatchWorkers < 1 || o.BatchWorkers > 64 {
		return nil, usageError{fmt.Sprintf("--batch-workers: %d; give 1..64", o.BatchWorkers)}
	}
	if o.Procs < 0 || o.Procs > 1024 {
		return nil, usageError{fmt.Sprintf("--procs: %d; give 1..1024 (0: one per batch worker)", o.Procs)}
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, usageError{fmt.Sprintf("--port: %d is no port (0..65535)", o.Port)}
	}
	if o.MaxValue <= 0 || o.MaxValue > dc.MaxValue {
		return nil, usageError{fmt.Sprintf("--max-value: %d B; give 1b..512mb (Redis' proto-max-bulk-len)", o.MaxValue)}
	}
	if o.StreamBudget < 1<<16 {
		return nil, usageError{fmt.Sprintf("--stream-budget: %d B holds no useful frame; give at least 64kb", o.StreamBudget)}
	}
	if o.DedupMemory < entryBytes {
		return nil, usageError{fmt.Sprintf("--dedup-memory %d: holds no write; give at least %d bytes", o.DedupMemory, entryBytes)}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"dedup-span", o.DedupSpan}, {"stream-stall", o.StreamStall}, {"stream-idle", o.StreamIdle}} {
		if d.v <= 0 {
			return nil, usageError{fmt.Sprintf("--%s: give a positive duration, e.g. 30s", d.name)}
		}
	}
	if _, err := controlListener(o.Control, true); err != nil {
		return nil, usageError{"--control: " + err.Error()}
	}
	if _, _, err := redisTarget(o.RedisURL); err != nil {
		return nil, usageError{"--redis-url " + o.RedisURL + ": " + err.Error()}
	}
	if (o.RedisUser == "") != (o.RedisPasswordFile == "") {
		return nil, usageError{"--redis-user and --redis-password-file go together: give both or neither"}
	}
	if o.CoherencePeer != "" {
		if _, err := net.ResolveUDPAddr("udp", o.CoherencePeer); err != nil {
			return nil, usageError{fmt.Sprintf("--coherence-peer: %q: give HOST:PORT", o.CoherencePeer)}
		}
	}
	switch o.LogLevel {
	case "debug", "info", "warning", "error":
	default:
		return nil, usageError{fmt.Sprintf("--log-level: %q: choose debug, info, warning or error", o.LogLevel)}
	}
	return o, nil
}

// redisTarget is the network and address of a --redis-url: unix:///path or redis://host:port (a URL that
// names a database is refused: user data is database 0, the shim's own records database markerDB).
func redisTarget(raw string) (network, address string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("not a URL: %v", err)
	}
	switch u.Scheme {
	case "unix":
		if u.Path == "" {
			return "", "", errors.New("give the socket's path: unix:///path/to/redis.sock")
		}
		if db := u.Query().Get("db"); db != "" && db != "0" {
			return "", "", fmt.Errorf("names database %s; name the server only (user data is database 0)", db)
		}
		return "unix", u.Path, nil
	case "redis":
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return "", "", fmt.Errorf("names database %s; name the server only (user data is database 0)", p)
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "6379")
		}
		return "tcp", host, nil
	}
	return "", "", errors.New("use unix:///path/to/redis.sock or redis://host:port")
}

// controlListener opens (or, with check, only parses) the control channel's address.
func controlListener(address string, check bool) (net.Listener, error) {
	kind, rest, _ := strings.Cut(address, ":")
	switch {
	case kind == "unix" && rest != "":
		if check {
			return nil, nil
		}
		_ = os.Remove(rest)
		return net.Listen("unix", rest)
	case kind == "tcp" && rest != "":
		if _, _, err := net.SplitHostPort(rest); err != nil {
			return nil, fmt.Errorf("bad shim control address %q; use unix:/path or tcp:host:port", address)
		}
		if check {
			return nil, nil
		}
		return net.Listen("tcp", rest)
	}
	return nil, fmt.Errorf("bad shim control address %q; use unix:/path or tcp:host:port", address)
}
