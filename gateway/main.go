// Command distcache-gateway lets any Redis client use a DistCache deployment: it speaks RESP2 (and RESP3 after
// HELLO 3) on a client host and turns each command into protocol v2 requests through the fabric, so a GET of a
// cached key is answered by a switch and everything else by the key's storage server (docs/gateway.md).
//
//	distcache-gateway --cluster C [--listen 127.0.0.1:6379] [options]
//
// It prints "gateway ready listen=IP:PORT servers=N" once it serves, and exits on SIGTERM or SIGINT. A bad
// command line or cluster file is one line and exit status 2; a start that fails (the address in use) is one
// line and exit status 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"distcache/internal/cluster"
	"distcache/internal/fabric"
)

func main() { os.Exit(run(os.Args[1:])) }

type options struct {
	clusterFile, listen, listenHost, source, passwordFile, logFile, logLevel, cpuProfile string
	servers                                                                              serverAddrs
	timeout, minTimeout                                                                  time.Duration
	retries, maxClients                                                                  int
	queryBudget                                                                          int64
	cluster                                                                              *cluster.Cluster
	password                                                                             string
}

// serverAddrs are --server-address NAME=HOST:PORT flags: where a storage server's DistCache port is, when
// not at its address in the cluster (a shim run by hand on loopback).
type serverAddrs map[string]netip.AddrPort

func (s serverAddrs) String() string { return "" }
func (s serverAddrs) Set(v string) error {
	name, addr, found := strings.Cut(v, "=")
	if !found {
		return fmt.Errorf("%q: write NAME=HOST:PORT, e.g. r0s0=127.0.0.1:8888", v)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %s is no IPv4 HOST:PORT", v, addr)
	}
	s[name] = ap
	return nil
}

func usage(msg string) int {
	fmt.Fprintf(os.Stderr, "distcache-gateway: error: %s (see distcache-gateway -h)\n", msg)
	return 2
}

func parseOptions(args []string) (*options, error) {
	o := &options{servers: serverAddrs{}}
	fs := flag.NewFlagSet("distcache-gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.clusterFile, "cluster", "", "cluster.json of the deployment (required)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:6379", "HOST:PORT to serve Redis clients on: this host's own "+
		"address (never every interface; port 0: any free one)")
	fs.StringVar(&o.source, "source", "", "the address fabric requests leave from (default: --listen's host)")
	fs.Var(o.servers, "server-address", "NAME=HOST:PORT: where storage server NAME's shim listens, if not at "+
		"its address in the cluster (repeat per server; a shim run by hand on loopback)")
	fs.StringVar(&o.passwordFile, "password-file", "", "a file holding the password clients must AUTH with "+
		"(Redis' requirepass; default: none)")
	fs.DurationVar(&o.timeout, "timeout", 500*time.Millisecond, "the longest wait for one copy of a request")
	fs.DurationVar(&o.minTimeout, "min-timeout", fabric.DefaultMinTimeout, "the floor of the retransmission "+
		"timeout learned per storage server")
	fs.IntVar(&o.retries, "retries", 3, "copies of a request sent again before its outcome is unknown")
	fs.IntVar(&o.maxClients, "max-clients", 10000, "connections served at once (Redis' maxclients)")
	fs.Int64Var(&o.queryBudget, "query-budget", 1<<30, "bytes of commands not yet complete that all "+
		"connections may hold at once (past it, the connection reading is closed with an error)")
	fs.StringVar(&o.logFile, "log-file", "", "log here instead of stderr")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warning or error")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "write a pprof CPU profile of the run here (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Println("usage: distcache-gateway --cluster C [--listen HOST:PORT] [options]")
			fs.PrintDefaults()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.clusterFile == "" {
		return nil, errors.New("--cluster is required")
	}
	host, port, err := net.SplitHostPort(o.listen)
	ip, perr := netip.ParseAddr(host)
	if err != nil || perr != nil || !ip.Is4() {
		return nil, fmt.Errorf("--listen %q: give IPv4 HOST:PORT, e.g. 127.0.0.1:6379", o.listen)
	}
	if ip.IsUnspecified() {
		return nil, fmt.Errorf("--listen %s: serve on this host's own address, not every interface", o.listen)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return nil, fmt.Errorf("--listen %q: %s is no port", o.listen, port)
	}
	o.listenHost = host
	if o.source == "" {
		o.source = host
	}
	if a, err := netip.ParseAddr(o.source); err != nil || !a.Is4() {
		return nil, fmt.Errorf("--source %q is no IPv4 address", o.source)
	}
	if o.retries < 0 || o.retries > 1000 {
		return nil, fmt.Errorf("--retries %d: give 0..1000 ((retries + 1) x timeout within a storage server's 30 s retry span)", o.retries)
	}
	if o.maxClients < 1 || o.maxClients > 1<<20 {
		return nil, fmt.Errorf("--max-clients %d: give 1..1048576", o.maxClients)
	}
	if o.queryBudget < 1<<20 {
		return nil, fmt.Errorf("--query-budget %d: give at least 1048576 bytes", o.queryBudget)
	}
	if o.timeout <= 0 || o.minTimeout <= 0 || o.minTimeout > o.timeout {
		return nil, fmt.Errorf("--timeout %v, --min-timeout %v: need 0 < min-timeout <= timeout", o.timeout, o.minTimeout)
	}
	if o.passwordFile != "" {
		raw, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %v", err)
		}
		o.password = strings.TrimRight(string(raw), "\r\n")
		if o.password == "" {
			return nil, fmt.Errorf("--password-file %s is empty", o.passwordFile)
		}
	}
	if _, ok := map[string]bool{"debug": true, "info": true, "warning": true, "error": true}[o.logLevel]; !ok {
		return nil, fmt.Errorf("--log-level %q: give debug, info, warning or error", o.logLevel)
	}
	return o, nil
}

func run(args []string) int {
	o, err := parseOptions(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return usage(err.Error())
	}
	if o.cluster, err = cluster.Load(o.clusterFile); err != nil {
		return usage("--cluster: " + err.Error())
	}
	for name := range o.servers {
		if _, err := o.cluster.Server(name); err != nil {
			return usage("--server-address: " + err.Error())
		}
	}
	if err := setupLogging(o); err != nil {
		return usage("--log-file: " + err.Error())
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return usage("--cpu-profile: " + err.Error())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return usage("--cpu-profile: " + err.Error())
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	g, err := start(o)
	if err != nil {
		slog.Error("cannot start", "err", err)
		fmt.Fprintf(os.Stderr, "distcache-gateway: cannot start: %v\n", err)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	fmt.Printf("gateway ready listen=%s servers=%d\n", g.ln.Addr(), len(o.cluster.ServerNames()))
	slog.Info("serving", "listen", g.ln.Addr().String())
	<-stop
	g.Close()
	return 0
}

func setupLogging(o *options) error {
	var w io.Writer = os.Stderr
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		w = f
	}
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warning": slog.LevelWarn,
		"error": slog.LevelError}[o.logLevel]
	slog.SetDefault(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("gateway", os.Getpid()))
	return nil
}

type gatewayStats struct {
	connections, refusedConns, commands, rejected, hits, misses, timeouts, badReplies, protocolErrors,
	authFailures, queryLimited atomic.Uint64
}

// Gateway is one running gateway.
type Gateway struct {
	opts    *options
	table   *commandTable
	fabric  *fabric.Client
	ln      net.Listener
	port    int
	started time.Time
	nextID  atomic.Int64
	// bytes connections have read that are no complete command yet (capped)
	queryBytes atomic.Int64
	stats      gatewayStats
	wg         sync.WaitGroup

	mu       sync.Mutex
	clients  map[int64]*client
	cmdStats map[string]uint64
}

func start(o *options) (*Gateway, error) {
	table, err := loadTable()
	if err != nil {
		return nil, err
	}
	cfg := fabric.Config{Cluster: o.cluster, Source: netip.MustParseAddr(o.source), Timeout: o.timeout,
		MinTimeout: o.minTimeout, Retries: o.retries}
	if o.retries == 0 {
		cfg.Retries = -1
	}
	if len(o.servers) > 0 {
		cfg.Resolve = func(name string) (netip.AddrPort, error) {
			if a, ok := o.servers[name]; ok {
				return a, nil
			}
			srv, err := o.cluster.Server(name)
			if err != nil {
				return netip.AddrPort{}, err
			}
			return netip.ParseAddrPort(srv.IP + ":8888")
		}
	}
	fc, err := fabric.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp4", o.listen)
	if err != nil {
		fc.Close()
		return nil, err
	}
	g := &Gateway{opts: o, table: table, fabric: fc, ln: ln, port: ln.Addr().(*net.TCPAddr).Port,
		started: time.Now(), clients: map[int64]*client{}, cmdStats: map[string]uint64{}}
	g.wg.Add(1)
	go g.acceptLoop()
	return g, nil
}

func (g *Gateway) acceptLoop() {
	defer g.wg.Done()
	for {
		conn, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			slog.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors: do not spin
			continue
		}
		g.mu.Lock()
		full := len(g.clients) >= g.opts.maxClients
		g.mu.Unlock()
		if full {
			g.stats.refusedConns.Add(1)
			_, _ = conn.Write([]byte("-ERR max number of clients reached\r\n"))
			conn.Close()
			continue
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		g.wg.Add(1)
		go g.serveConn(conn)
	}
}

func (g *Gateway) countCommand(name string) {
	g.mu.Lock()
	g.cmdStats[name]++
	g.mu.Unlock()
}

// Close stops accepting, closes every connection and the fabric client.
func (g *Gateway) Close() {
	g.ln.Close()
	g.mu.Lock()
	for _, c := range g.clients {
		c.conn.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	g.fabric.Close()
}
