// Package testbed runs storage servers for the Go tests of the parts that talk to them (fabric, gateway):
// a redis-server and the compiled shim (built from this module) per server, on loopback, with a cluster file
// of the servers' shape. There are no switches: every request is answered by its key's shim.
package testbed

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"distcache/internal/cluster"
)

var (
	buildOnce sync.Once
	shimPath  string
	buildErr  error
)

// ShimBinary builds the shim once per test process (into a temporary folder) and returns its path.
func ShimBinary(t testing.TB) string {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "distcache-testbed-")
		if err != nil {
			buildErr = err
			return
		}
		shimPath = filepath.Join(dir, "distcache-shim")
		out, err := exec.Command("go", "build", "-o", shimPath, "distcache/shim").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build distcache/shim: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return shimPath
}

// Server is one storage server of a Bed: its shim's address and its redis-server.
type Server struct {
	Name  string
	Addr  netip.AddrPort
	Redis *redis.Client
	shim  *exec.Cmd
	dir   string
	args  []string
}

// Bed is a cluster's storage servers, running.
type Bed struct {
	Cluster     *cluster.Cluster
	ClusterFile string
	Servers     map[string]*Server
}

// Start runs racks x perRack storage servers; they stop when the test ends. extra: more shim options.
func Start(t testing.TB, racks, perRack int, extra ...string) *Bed {
	t.Helper()
	bin := ShimBinary(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not installed (make deps installs it)")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	body := fmt.Sprintf(`{"storage_racks": %d, "servers_per_rack": %d}`, racks, perRack)
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	b := &Bed{Cluster: c, ClusterFile: file, Servers: map[string]*Server{}}
	for _, name := range c.ServerNames() {
		s := &Server{Name: name, dir: filepath.Join(dir, name)}
		if err := os.Mkdir(s.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(s.dir, "redis.sock")
		rs := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
			"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
		if err := rs.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Process.Kill(); _ = rs.Wait() })
		s.Redis = redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
		t.Cleanup(func() { s.Redis.Close() })
		waitRedis(t, s.Redis)
		s.args = append([]string{"--cluster", file, "--server", name, "--listen", "127.0.0.1", "--port", "0",
			"--redis-url", "unix://" + sock, "--control", "unix:" + filepath.Join(s.dir, "control.sock"), "--fresh",
			"--log-file", filepath.Join(s.dir, "shim.log")}, extra...)
		s.start(t, bin)
		b.Servers[name] = s
	}
	return b
}

var readyRE = regexp.MustCompile(`listen=([\d.]+:\d+)`)

func (s *Server) start(t testing.TB, bin string) {
	cmd := exec.Command(bin, s.args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	m := readyRE.FindStringSubmatch(line)
	if m == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the shim of %s did not start: %q %s", s.Name, line, stderr.String())
	}
	s.Addr = netip.MustParseAddrPort(m[1])
	s.shim = cmd
	t.Cleanup(func() { s.Stop() })
}

// Stop kills the server's shim (its redis-server keeps running).
func (s *Server) Stop() {
	if s.shim != nil && s.shim.Process != nil {
		_ = s.shim.Process.Kill()
		_ = s.shim.Wait()
		s.shim = nil
	}
}

func waitRedis(t testing.TB, r *redis.Client) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := r.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Resolve is where each server's shim listens (fabric.Config.Resolve).
func (b *Bed) Resolve(name string) (netip.AddrPort, error) {
	s := b.Servers[name]
	if s == nil {
		return netip.AddrPort{}, fmt.Errorf("no server %s in the bed", name)
	}
	return s.Addr, nil
}
