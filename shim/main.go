// Command distcache-shim runs one storage server's shim: DistCache over UDP (and its stream path over TCP)
// in front of one redis-server, with its control API on a Unix socket or a loopback TCP address.
//
//	distcache-shim --cluster C --server NAME --redis-url URL --control ADDR [options]
//
// It prints "shim ready server=NAME listen=IP:PORT control=ADDR" once it serves, and exits on SIGTERM or
// SIGINT. A bad command line or cluster file is one line and exit status 2; a start that fails (Redis
// unreachable, an address in use) is one line and exit status 1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"distcache/internal/cluster"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage(msg string) int {
	fmt.Fprintf(os.Stderr, "distcache-shim: error: %s (see distcache-shim -h)\n", msg)
	return 2
}

func run(args []string) int {
	o, err := parseOptions(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return usage(err.Error())
	}
	c, err := cluster.Load(o.Cluster)
	if err != nil {
		return usage("--cluster: " + err.Error())
	}
	srv, err := c.Server(o.ServerName)
	if err != nil {
		return usage("--server: " + err.Error())
	}
	closeLog, err := setupLogging(o)
	if err != nil {
		return usage("--log-file: " + err.Error())
	}
	defer closeLog()
	setProcs(o)
	if err := armBreaks(); err != nil {
		return usage(err.Error())
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return usage("--cpu-profile: " + err.Error())
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return usage("--cpu-profile: " + err.Error())
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	s := newShim(o, c, srv)
	ctl, err := startAll(s, o)
	if err != nil {
		if o.LogFile != "" { // else the log is stderr, where the one line below goes
			slog.Error("cannot start", "err", err)
		}
		fmt.Fprintf(os.Stderr, "distcache-shim: cannot start: %v\n", err)
		s.close()
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("shim ready server=%s listen=%s:%d control=%s\n", srv.Name, o.Listen, o.Port, o.Control)
	slog.Info("serving", "server", srv.Name, "listen", o.Listen, "port", o.Port)
	<-stop
	done := make(chan struct{})
	go func() { ctl.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
		ctl.Stop()
	}
	st := s.stats()
	slog.Info("exiting", "requests", st.Requests, "errors", st.Errors, "malformed", st.Malformed,
		"batches", s.batches.Load(), "batched", s.batched.Load())
	s.close()
	return 0
}

func startAll(s *Shim, o *Options) (*grpc.Server, error) {
	if err := s.start(); err != nil {
		return nil, err
	}
	return serveControl(s, o.Control)
}

// setProcs sets how many processors run the shim's goroutines: --procs, else $GOMAXPROCS, else one per batch
// worker. Measured on 2 cores (make bench-shim): a GET costs 5 µs of CPU on one processor and 8 µs on two,
// the difference the runtime's wake-ups of idle processors and its system monitor (docs/performance.md).
func setProcs(o *Options) {
	switch {
	case o.Procs > 0:
		runtime.GOMAXPROCS(o.Procs)
	case os.Getenv("GOMAXPROCS") == "":
		runtime.GOMAXPROCS(o.BatchWorkers)
	}
}

// setupLogging logs to --log-file (or stderr) at --log-level, a line per record with the process id, as the
// Python services' logs read.
func setupLogging(o *Options) (func(), error) {
	var w io.Writer = os.Stderr
	closer := func() {}
	if o.LogFile != "" {
		f, err := os.OpenFile(o.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		w, closer = f, func() { f.Close() }
	}
	level := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warning": slog.LevelWarn,
		"error": slog.LevelError}[o.LogLevel]
	h := slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})
	slog.SetDefault(slog.New(h).With("shim", os.Getpid()))
	return closer, nil
}
