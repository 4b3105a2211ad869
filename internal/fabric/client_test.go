package fabric

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"distcache/internal/dc"
	"distcache/internal/testbed"
	"distcache/internal/wire"
)

var loopback = netip.MustParseAddr("127.0.0.1")

func newClient(t *testing.T, b *testbed.Bed, tweak func(*Config)) *Client {
	t.Helper()
	cfg := Config{Cluster: b.Cluster, Source: loopback, Resolve: b.Resolve, Timeout: 300 * time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRTOFollowsRFC6298(t *testing.T) {
	r := newRTO(time.Second, 10*time.Millisecond, time.Second)
	if r.current() != time.Second {
		t.Fatalf("before a sample: %v", r.current())
	}
	r.sample(100 * time.Millisecond) // SRTT 0.1, RTTVAR 0.05: RTO 0.1 + 4 x 0.05
	if got := r.current(); got != 300*time.Millisecond {
		t.Fatalf("after one sample: %v", got)
	}
	r.sample(200 * time.Millisecond) // RTTVAR 3/4 0.05 + 1/4 0.1 = 0.0625, SRTT 0.1125: 0.3625
	if got := r.current(); got < 362*time.Millisecond || got > 363*time.Millisecond {
		t.Fatalf("after two samples: %v", got)
	}
	g := r.generation
	r.timedOut(g)
	r.timedOut(g) // once per generation
	if got := r.current(); got < 724*time.Millisecond || got > 726*time.Millisecond {
		t.Fatalf("after a timeout: %v, want 0.725 s (doubled once)", got)
	}
	r.timedOut(r.generation)
	if got := r.current(); got != time.Second {
		t.Fatalf("after two timeouts: %v, want the 1 s cap", got)
	}
}

func TestScheduleGivesUpAtTheFixedTimeoutsBound(t *testing.T) {
	r := newRTO(100*time.Millisecond, 10*time.Millisecond, 100*time.Millisecond)
	r.sample(5 * time.Millisecond)
	s := schedule{rto: r, retries: 2}
	now := time.Unix(0, 0)
	copies := 0
	for {
		until, ok := s.nextCopy(now)
		if !ok {
			break
		}
		copies++
		if until.Sub(s.start) > 300*time.Millisecond {
			t.Fatalf("a copy waits past the deadline: %v", until.Sub(s.start))
		}
		s.timedOut()
		now = until
	}
	if got := now.Sub(s.start); got != 300*time.Millisecond || copies < 3 {
		t.Fatalf("gave up after %v and %d copies, want 300ms and at least 3", got, copies)
	}
}

func TestRequestsReachTheServerThatOwnsTheKey(t *testing.T) {
	b := testbed.Start(t, 1, 2)
	c := newClient(t, b, nil)
	ctx := context.Background()
	owners := map[string]int{}
	for i := 0; i < 40; i++ {
		key := []byte("user:" + string(rune('a'+i%26)) + strings.Repeat("x", i))
		value := bytes.Repeat([]byte{byte(i)}, 1+i*3)
		if r := c.Do(Request{Op: dc.OpPut, Key: key, Value: value}); r.Err != nil || r.Status != dc.StatusOk {
			t.Fatalf("PUT %q: %+v", key, r)
		}
		server := c.Server(key)
		owners[server]++
		got, err := b.Servers[server].Redis.Get(ctx, string(key)).Bytes()
		if err != nil || !bytes.Equal(got, value) {
			t.Fatalf("%q on %s's redis: %q %v", key, server, got, err)
		}
		if r := c.Do(Request{Op: dc.OpGet, Key: key}); r.Err != nil || !bytes.Equal(r.Value, value) || r.Cached {
			t.Fatalf("GET %q: %+v", key, r)
		}
	}
	if len(owners) != 2 {
		t.Fatalf("40 keys all on %v", owners)
	}
	if r := c.Do(Request{Op: dc.OpGet, Key: []byte("absent")}); r.Err != nil || r.Status != dc.StatusNotFound ||
		r.Value != nil {
		t.Fatalf("GET absent: %+v", r)
	}
	if r := c.Do(Request{Op: dc.OpDelete, Key: []byte("user:a")}); r.Err != nil || r.Status != dc.StatusOk {
		t.Fatalf("DELETE: %+v", r)
	}
	r := c.Do(Request{Op: dc.OpExec, Key: []byte("n"), Args: [][]byte{[]byte("INCRBY"), []byte("n"), []byte("5")}})
	if r.Err != nil || string(r.Value) != ":5\r\n" {
		t.Fatalf("EXEC INCRBY: %+v", r)
	}
	r = c.Do(Request{Op: dc.OpGet, Key: []byte("n")})
	if r.Err != nil || string(r.Value) != "5" {
		t.Fatalf("GET after INCRBY: %+v", r)
	}
	r = c.Do(Request{Op: dc.OpExec, Key: []byte("n"), Args: [][]byte{[]byte("LPUSH"), []byte("n"), []byte("x")}})
	if r.Err != nil || r.Status != dc.StatusWrongType || !strings.HasPrefix(string(r.Value), "-WRONGTYPE") {
		t.Fatalf("EXEC LPUSH on a string: %+v", r)
	}
	st := c.Stats()
	if st.Requests != 85 || st.Hits != 0 || st.Timeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLargeValuesTakeTheStreamPath: a value past a datagram goes on TCP, and so does the reply that carries it.
func TestLargeValuesTakeTheStreamPath(t *testing.T) {
	b := testbed.Start(t, 1, 1)
	c := newClient(t, b, nil)
	value := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MB
	longKey := bytes.Repeat([]byte("k"), 4000)
	for _, key := range [][]byte{[]byte("big"), longKey} {
		if r := c.Do(Request{Op: dc.OpPut, Key: key, Value: value}); r.Err != nil {
			t.Fatalf("PUT 1 MB: %v", r.Err)
		}
		r := c.Do(Request{Op: dc.OpGet, Key: key})
		if r.Err != nil || !bytes.Equal(r.Value, value) {
			t.Fatalf("GET 1 MB: %d bytes, %v", len(r.Value), r.Err)
		}
	}
	if st := c.Stats(); st.Streamed != 4 {
		t.Fatalf("%d requests streamed, want 4", st.Streamed)
	}
}

// TestNoReplyIsATimeoutWithItsOutcomeUnknown: a server that never answers costs the retries, then an error
// that says the outcome is unknown; the copies carry their attempt numbers.
func TestNoReplyIsATimeoutWithItsOutcomeUnknown(t *testing.T) {
	b := testbed.Start(t, 1, 1)
	silent, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var attempts []int
	var mu sync.Mutex
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := silent.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			attempts = append(attempts, int(buf[dc.OffFlags]&dc.FlagAttempt)>>dc.AttemptShift)
			mu.Unlock()
			_ = n
		}
	}()
	c := newClient(t, b, func(cfg *Config) {
		cfg.Resolve = func(string) (netip.AddrPort, error) { return silent.LocalAddr().(*net.UDPAddr).AddrPort(), nil }
		cfg.Timeout, cfg.MinTimeout, cfg.Retries = 100*time.Millisecond, 100*time.Millisecond, 2
	})
	began := time.Now()
	r := c.Do(Request{Op: dc.OpPut, Key: []byte("k"), Value: []byte("v")})
	var fe *Error
	if !errors.As(r.Err, &fe) || !fe.Timeout || !strings.Contains(fe.Msg, "outcome is unknown") {
		t.Fatalf("want a timeout, got %+v", r)
	}
	if took := time.Since(began); took < 290*time.Millisecond || took > 2*time.Second {
		t.Fatalf("gave up after %v, want about 300 ms", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 3 || attempts[0] != 0 || attempts[1] != 1 || attempts[2] != 2 {
		t.Fatalf("copies with attempts %v, want [0 1 2]", attempts)
	}
}

// TestAReplyFromElsewhereIsIgnored: a datagram with the right seq from another port is no reply.
func TestAReplyFromElsewhereIsIgnored(t *testing.T) {
	b := testbed.Start(t, 1, 1)
	relay, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	forger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	shim := net.UDPAddrFromAddrPort(b.Servers["r0s0"].Addr)
	// the relay forwards the request to the shim and the shim's reply back (from the relay's port: where the
	// client sent it); before that, the forger answers with a forged value from another port
	go func() {
		buf := make([]byte, 65536)
		var client *net.UDPAddr
		for {
			n, from, err := relay.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if from.Port != shim.Port {
				client = from
				m, _ := wire.Decode(buf[:n])
				forged := m.Reply(dc.StatusOk, []byte("forged"))
				out, _ := forged.Encode()
				_, _ = forger.WriteToUDP(out, client)
				_, _ = relay.WriteToUDP(buf[:n], shim)
				continue
			}
			_, _ = relay.WriteToUDP(buf[:n], client)
		}
	}()
	direct := newClient(t, b, nil)
	if r := direct.Do(Request{Op: dc.OpPut, Key: []byte("k"), Value: []byte("true")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	c := newClient(t, b, func(cfg *Config) {
		cfg.Resolve = func(string) (netip.AddrPort, error) { return relay.LocalAddr().(*net.UDPAddr).AddrPort(), nil }
	})
	r := c.Do(Request{Op: dc.OpGet, Key: []byte("k")})
	if r.Err != nil || string(r.Value) != "true" {
		t.Fatalf("GET through the relay: %+v", r)
	}
	if st := c.Stats(); st.Ignored != 1 {
		t.Fatalf("ignored %d datagrams, want 1 (the forgery)", st.Ignored)
	}
}

// TestManyCallersShareTheSocket: requests of many goroutines in flight at once, each answered with its own.
func TestManyCallersShareTheSocket(t *testing.T) {
	b := testbed.Start(t, 1, 2)
	c := newClient(t, b, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls := make([]*Call, 0, 50)
			for i := 0; i < 50; i++ {
				key := []byte{byte(g), byte(i)}
				calls = append(calls, c.Go(Request{Op: dc.OpPut, Key: key, Value: key}))
			}
			for _, call := range calls {
				if r := call.Wait(); r.Err != nil {
					errs <- r.Err
					return
				}
			}
			for i := 0; i < 50; i++ {
				key := []byte{byte(g), byte(i)}
				if r := c.Do(Request{Op: dc.OpGet, Key: key}); r.Err != nil || !bytes.Equal(r.Value, key) {
					errs <- errors.New("wrong value for " + string(key))
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
}
