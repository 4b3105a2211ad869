package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"distcache/internal/cluster"
	"distcache/internal/testbed"
)

// startGateway runs a gateway in front of bed's storage servers, on loopback.
func startGateway(t *testing.T, bed *testbed.Bed, extra ...string) *Gateway {
	t.Helper()
	args := []string{"--cluster", bed.ClusterFile, "--listen", "127.0.0.1:0", "--timeout", "200ms"}
	for name, s := range bed.Servers {
		args = append(args, "--server-address", name+"="+s.Addr.String())
	}
	o, err := parseOptions(append(args, extra...))
	if err != nil {
		t.Fatal(err)
	}
	if o.cluster, err = cluster.Load(o.clusterFile); err != nil {
		t.Fatal(err)
	}
	g, err := start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

func goRedis(g *Gateway, proto int) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: g.ln.Addr().String(), Protocol: proto, MaxRetries: -1})
}

// TestGoRedisWorksUnmodified: go-redis connects (HELLO 3, CLIENT SETINFO), and the strings family, fan-out
// commands and a pipeline behave as on Redis, over keys of two storage servers.
func TestGoRedisWorksUnmodified(t *testing.T) {
	bed := testbed.Start(t, 1, 2)
	g := startGateway(t, bed)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			r := goRedis(g, proto)
			defer r.Close()
			if err := r.Set(ctx, "greeting", "hello", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := r.Get(ctx, "greeting").Result(); err != nil || v != "hello" {
				t.Fatalf("GET: %q %v", v, err)
			}
			if _, err := r.Get(ctx, "nothing").Result(); !errors.Is(err, redis.Nil) {
				t.Fatalf("GET of no key: %v", err)
			}
			if n, err := r.IncrBy(ctx, "counter", 5).Result(); err != nil || n != 5*int64(proto-1) {
				t.Fatalf("INCRBY: %d %v", n, err)
			}
			keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
			servers := map[string]bool{}
			var pairs []any
			for _, k := range keys {
				pairs = append(pairs, k, k+"!")
				servers[g.fabric.Server([]byte(k))] = true
			}
			if len(servers) != 2 {
				t.Fatalf("keys %v all on one server", keys)
			}
			if err := r.MSet(ctx, pairs...).Err(); err != nil {
				t.Fatal(err)
			}
			vals, err := r.MGet(ctx, append(keys, "missing")...).Result()
			if err != nil || len(vals) != 13 || vals[0] != "a!" || vals[11] != "l!" || vals[12] != nil {
				t.Fatalf("MGET: %v %v", vals, err)
			}
			for _, k := range keys {
				got, _ := bed.Servers[g.fabric.Server([]byte(k))].Redis.Get(ctx, k).Result()
				if got != k+"!" {
					t.Fatalf("%s on its storage server: %q", k, got)
				}
			}
			if n, err := r.Exists(ctx, "a", "a", "f", "missing").Result(); err != nil || n != 3 {
				t.Fatalf("EXISTS: %d %v", n, err)
			}
			if n, err := r.Del(ctx, "a", "b", "missing").Result(); err != nil || n != 2 {
				t.Fatalf("DEL: %d %v", n, err)
			}
			if err := r.Set(ctx, "ttl", "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if d, err := r.TTL(ctx, "ttl").Result(); err != nil || d < 50*time.Second {
				t.Fatalf("TTL: %v %v", d, err)
			}
			// a read after a write in the same pipeline sees the write; a write after a read does not overtake it
			p := r.Pipeline()
			before := p.Get(ctx, "pipe")
			p.Set(ctx, "pipe", "1", 0)
			after := p.Get(ctx, "pipe")
			incr := p.Incr(ctx, "pipe")
			last := p.Get(ctx, "pipe")
			if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			if before.Err() != redis.Nil && proto == 2 || after.Val() != "1" || incr.Val() != 2 || last.Val() != "2" {
				t.Fatalf("pipeline: %v %v %v %v", before, after, incr, last)
			}
			if err := r.Del(ctx, "pipe").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.LPush(ctx, "greeting", "x").Result(); err == nil ||
				!strings.HasPrefix(err.Error(), "WRONGTYPE") {
				t.Fatalf("LPUSH on a string: %v", err)
			}
			if _, err := r.Incr(ctx, "greeting").Result(); err == nil ||
				err.Error() != "ERR value is not an integer or out of range" {
				t.Fatalf("INCR of a word: %v", err)
			}
			if err := r.Do(ctx, "NOSUCH", "x").Err(); err == nil ||
				err.Error() != "ERR unknown command 'NOSUCH', with args beginning with: 'x' " {
				t.Fatalf("unknown command: %v", err)
			}
			if err := r.Do(ctx, "get").Err(); err == nil ||
				err.Error() != "ERR wrong number of arguments for 'get' command" {
				t.Fatalf("arity: %v", err)
			}
			other := ""
			for _, k := range keys {
				if g.fabric.Server([]byte(k)) != g.fabric.Server([]byte("a")) {
					other = k
				}
			}
			if err := r.Do(ctx, "sunionstore", "a", other).Err(); err == nil ||
				!strings.HasPrefix(err.Error(), "CROSSSLOT") {
				t.Fatalf("a multi-key command over two servers: %v", err)
			}
			if err := r.Do(ctx, "blpop", "a", "0").Err(); err == nil || !strings.Contains(err.Error(), "blocking") {
				t.Fatalf("BLPOP: %v", err)
			}
		})
	}
}

// TestALargeValueAndAnOversizedKey: a 1 MB value goes through (the stream path); a key past the wire's
// limit is refused with a clear error, the connection kept.
func TestALargeValueAndAnOversizedKey(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed)
	ctx := context.Background()
	r := goRedis(g, 2)
	defer r.Close()
	big := strings.Repeat("0123456789", 100000)
	if err := r.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Get(ctx, "big").Result(); err != nil || v != big {
		t.Fatalf("GET 1 MB: %d bytes, %v", len(v), err)
	}
	err := r.Set(ctx, strings.Repeat("k", 70000), "v", 0).Err()
	if err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("a 70 000-byte key: %v", err)
	}
	if err := r.Ping(ctx).Err(); err != nil {
		t.Fatalf("the connection after the refusal: %v", err)
	}
}

// TestAServerDownIsAnErrorSayingTheOutcomeIsUnknown.
func TestAServerDownIsAnErrorSayingTheOutcomeIsUnknown(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed, "--retries", "1", "--timeout", "100ms", "--min-timeout", "50ms")
	bed.Servers["r0s0"].Stop()
	r := goRedis(g, 2)
	defer r.Close()
	err := r.Set(context.Background(), "k", "v", 0).Err()
	if err == nil || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Fatalf("SET with its server down: %v", err)
	}
	if err := r.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING after: %v", err)
	}
}

// raw sends data on a new connection and returns what came back before the gateway closed it or went quiet.
func raw(t *testing.T, g *Gateway, data string) string {
	t.Helper()
	conn, err := net.Dial("tcp", g.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	var out bytes.Buffer
	_, _ = out.ReadFrom(conn)
	return out.String()
}

// TestProtocolGarbageIsAnErrorThenTheConnectionCloses, as Redis does; an inline command works.
func TestProtocolGarbageIsAnErrorThenTheConnectionCloses(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed)
	if got := raw(t, g, "*x\r\n"); !strings.HasPrefix(got, "-ERR Protocol error") {
		t.Fatalf("a bad multibulk length: %q", got)
	}
	if got := raw(t, g, "PING\r\nECHO hi\r\n"); got != "+PONG\r\n$2\r\nhi\r\n" {
		t.Fatalf("inline commands: %q", got)
	}
	if got := raw(t, g, "*2\r\n$4\r\nECHO\r\n$5\r\nhel"); got != "" {
		t.Fatalf("a half-sent command: %q", got)
	}
	if got := raw(t, g, "HELLO 3\r\nGET nothing\r\nQUIT\r\nPING\r\n"); !strings.HasSuffix(got, "_\r\n+OK\r\n") {
		t.Fatalf("RESP3's nil, then QUIT: %q", got)
	}
	if g.stats.protocolErrors.Load() != 1 {
		t.Fatalf("protocol errors counted: %d", g.stats.protocolErrors.Load())
	}
}

// TestAuthWithThePasswordOfItsConfig.
func TestAuthWithThePasswordOfItsConfig(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, bed, "--password-file", pw)
	if got := raw(t, g, "GET k\r\n"); got != "-NOAUTH Authentication required.\r\n" {
		t.Fatalf("unauthenticated: %q", got)
	}
	if got := raw(t, g, "AUTH nope\r\nAUTH s3cret\r\nSET k v\r\n"); got !=
		"-WRONGPASS invalid username-password pair or user is disabled.\r\n+OK\r\n+OK\r\n" {
		t.Fatalf("AUTH: %q", got)
	}
	r := redis.NewClient(&redis.Options{Addr: g.ln.Addr().String(), Password: "s3cret"})
	defer r.Close()
	if v, err := r.Get(context.Background(), "k").Result(); err != nil || v != "v" {
		t.Fatalf("go-redis with the password (HELLO 3 AUTH): %q %v", v, err)
	}
}

// TestAClientThatDoesNotReadStopsBeingRead: pipelined commands whose replies are never read cost the gateway
// bounded memory: it stops reading the connection once its replies back up (the sender's writes stall).
func TestAClientThatDoesNotReadStopsBeingRead(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed)
	conn, err := net.Dial("tcp", g.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	const total = 10000000 // 60 MB of PING
	chunk := []byte(strings.Repeat("PING\r\n", 10000))
	_ = conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent := 0
	for sent < total {
		if _, err := conn.Write(chunk); err != nil {
			break
		}
		sent += 10000
	}
	if sent >= total {
		t.Fatal("60 MB of commands were taken without one reply read: nothing holds the client back")
	}
	if processed := g.stats.commands.Load(); processed >= total {
		t.Fatalf("%d commands processed", processed)
	}
	r := goRedis(g, 2) // others are still served
	defer r.Close()
	if err := r.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestAHalfSentCommandPastTheBudgetClosesItsConnection: what connections hold of commands not yet complete is
// bounded (--query-budget); the connection past it gets an error and is closed, others are served.
func TestAHalfSentCommandPastTheBudgetClosesItsConnection(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed, "--query-budget", "1048576")
	got := raw(t, g, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3000000\r\n"+strings.Repeat("v", 2000000))
	if !strings.HasPrefix(got, "-ERR the client's query buffer is over its limit") {
		t.Fatalf("past the budget: %q", got[:min(len(got), 200)])
	}
	if g.stats.queryLimited.Load() != 1 || g.queryBytes.Load() != 0 {
		t.Fatalf("limited %d, held %d", g.stats.queryLimited.Load(), g.queryBytes.Load())
	}
	if got := raw(t, g, "PING\r\n"); got != "+PONG\r\n" {
		t.Fatalf("another connection: %q", got)
	}
}

// TestNothingBetweenMultiAndExecIsApplied: the gateway runs no transactions; what a client queues after MULTI
// is refused and EXEC aborts, so none of it is applied.
func TestNothingBetweenMultiAndExecIsApplied(t *testing.T) {
	bed := testbed.Start(t, 1, 1)
	g := startGateway(t, bed)
	got := raw(t, g, "MULTI\r\nSET k v\r\nMULTI\r\nEXEC\r\nEXEC\r\nDISCARD\r\nGET k\r\n")
	lines := strings.Split(strings.TrimSuffix(got, "\r\n"), "\r\n")
	want := []string{"-ERR MULTI is not available", "-ERR SET not run: it follows a MULTI",
		"-ERR MULTI calls can not be nested", "-EXECABORT Transaction discarded", "-ERR EXEC without MULTI",
		"-ERR DISCARD without MULTI", "$-1"}
	if len(lines) != len(want) {
		t.Fatalf("%q", got)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("reply %d: %q, want %q...", i, lines[i], w)
		}
	}
}

// TestRueidisAutoPipelining: rueidis pipelines the commands of concurrent goroutines on one connection by
// itself (its client-side cache off: the gateway keeps no values and offers no tracking); each gets its own
// reply, and a read after its goroutine's write sees it.
func TestRueidisAutoPipelining(t *testing.T) {
	bed := testbed.Start(t, 1, 2)
	g := startGateway(t, bed)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{g.ln.Addr().String()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := 0; w < 50; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				key, value := fmt.Sprintf("auto:%d:%d", w, i%5), fmt.Sprintf("%d-%d", w, i)
				if err := c.Do(ctx, c.B().Set().Key(key).Value(value).Build()).Error(); err != nil {
					errs <- err
					return
				}
				got, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
				if err != nil || got != value {
					errs <- fmt.Errorf("%s: %q %v, want %q", key, got, err, value)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := g.stats.commands.Load(); n < 4000 {
		t.Fatalf("%d commands", n)
	}
}
