// Package fabric is the DistCache client of the compiled parts (the gateway): the Go twin of
// client_lib/client.py, whose docstring gives the protocol's rules this follows.
//
// A request is one datagram to the storage server that owns its key (h1), sent from the client host's own
// address; the network may answer a read from a switch cache (the reply comes from the server's address, the
// switch swaps them). A reply is taken only from where its request went and only when its seq, digest, op and
// key match. A request without a reply is sent again, same seq, after a retransmission timeout learned per
// server (reads apart from writes), its attempt number in the flags; it gives up (retries+1) x timeout after
// its first copy, its outcome unknown. A request or reply too large for a datagram goes on the stream path.
//
// Many callers share one Client: their datagrams leave in batches (one sendmmsg for what was queued while the
// last batch was being sent) and replies are read in batches (recvmmsg), whatever connection they are for.
package fabric

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"

	"distcache/internal/cluster"
	"distcache/internal/dc"
	"distcache/internal/wire"
)

const (
	batchSize = 64 // datagrams per system call
	// DefaultMaxInFlight bounds the requests in flight at once; past it Go waits for one to finish
	DefaultMaxInFlight = 16384
)

// Config says where a Client sends from and to, and how long it waits.
type Config struct {
	Cluster *cluster.Cluster
	// Source is the address requests leave from (the client host's own; its replies come back to it)
	Source netip.Addr
	// Resolve is where a storage server's DistCache port is (default: its address in the cluster, port 8888)
	Resolve func(server string) (netip.AddrPort, error)
	// Timeout is the longest wait for one copy, and the RTO before a server has answered (default 0.5 s)
	Timeout time.Duration
	// MinTimeout is the RTO's floor (default 20 ms, or Timeout if that is less)
	MinTimeout time.Duration
	// Retries is how many times a request may be sent again (default 3; a negative value: none)
	Retries     int
	MaxInFlight int
}

// Request is one protocol v2 request: a GET, PUT, DELETE, or an EXEC of one command (Args: its name first).
type Request struct {
	Op    dc.Op
	Key   []byte
	Value []byte
	Args  [][]byte
}

// Result is what a request got: the reply's status and value (a read's value, an EXEC's reply in RESP), and
// whether a switch answered; Err for what is no answer (Error).
type Result struct {
	Status   dc.Status
	Value    []byte
	Cached   bool
	ServedBy uint8
	Server   string // the storage server the key belongs to
	Err      error
}

// Error is a request that got no usable answer: no reply in time (Timeout: its outcome unknown), or a
// server's refusal (Status BUSY: not applied; ERROR, BAD_REQUEST, TOO_LARGE, WRONG_TYPE), Value its words.
type Error struct {
	Status  dc.Status
	Timeout bool
	Value   []byte
	Msg     string
}

func (e *Error) Error() string { return e.Msg }

// Stats are a Client's counters since it started.
type Stats struct {
	Requests, Hits, Copies, Ignored, Timeouts, Streamed uint64
}

// Call is one request in flight: Wait for its Result.
type Call struct {
	c        *Client
	req      Request
	msg      wire.Message
	data     []byte
	server   string
	dest     netip.AddrPort
	addr     *net.UDPAddr
	sched    schedule
	copySent time.Time
	done     chan struct{}
	res      Result
}

// Wait returns the call's Result once it has one.
func (call *Call) Wait() Result {
	<-call.done
	return call.res
}

// Done is closed when the call has its Result.
func (call *Call) Done() <-chan struct{} { return call.done }

type rtoKey struct {
	dest  netip.AddrPort
	write bool
}

type timer struct {
	at   time.Time
	call *Call
	copy int // the copy it times: stale once another was sent or a reply came
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// Client sends requests into the fabric and matches their replies. Safe for concurrent use.
type Client struct {
	cfg       Config
	conn      *net.UDPConn
	pconn     *ipv4.PacketConn
	digesters sync.Pool
	seq       atomic.Uint64
	slots     chan struct{}
	dests     map[string]netip.AddrPort
	streams   *streamLinks
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	sendWake  chan struct{}
	timerWake chan struct{}

	requests, hits, copies, ignored, timeouts, streamed atomic.Uint64

	mu      sync.Mutex // everything below
	pending map[uint64]*Call
	rtos    map[rtoKey]*rto
	timers  timerHeap
	out     []ipv4.Message
	closed  bool
}

// New opens a Client: a datagram socket on cfg.Source, and the goroutines that send, receive and retry.
func New(cfg Config) (*Client, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("fabric: no cluster")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.Retries == 0 {
		cfg.Retries = 3
	} else if cfg.Retries < 0 {
		cfg.Retries = 0
	}
	if cfg.MinTimeout == 0 {
		cfg.MinTimeout = min(DefaultMinTimeout, cfg.Timeout)
	}
	if cfg.Timeout < 0 || cfg.MinTimeout < 0 || cfg.MinTimeout > cfg.Timeout {
		return nil, fmt.Errorf("fabric: timeout %v and its floor %v: need 0 < floor <= timeout", cfg.Timeout,
			cfg.MinTimeout)
	}
	span := time.Duration(dc.RetrySpanSeconds * float64(time.Second))
	if time.Duration(cfg.Retries+1)*cfg.Timeout > span {
		return nil, fmt.Errorf("fabric: (retries + 1) x timeout = %v outlasts the %v a storage server remembers a "+
			"write: a late retry could be applied twice; lower either", time.Duration(cfg.Retries+1)*cfg.Timeout, span)
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	c := &Client{cfg: cfg, slots: make(chan struct{}, cfg.MaxInFlight), dests: map[string]netip.AddrPort{},
		sendWake: make(chan struct{}, 1), timerWake: make(chan struct{}, 1), pending: map[uint64]*Call{},
		rtos: map[rtoKey]*rto{}}
	// the high 32 bits at random: two clients of one host (one address, which with seq is the shim's request
	// identity) do not share sequence numbers
	c.seq.Store(uint64(rand.Uint32()) << 32)
	for _, name := range cfg.Cluster.ServerNames() {
		var dest netip.AddrPort
		var err error
		if cfg.Resolve != nil {
			dest, err = cfg.Resolve(name)
		} else {
			var srv *cluster.Server
			if srv, err = cfg.Cluster.Server(name); err == nil {
				dest = netip.AddrPortFrom(netip.MustParseAddr(srv.IP), dc.DCPort)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("fabric: storage server %s: %v", name, err)
		}
		c.dests[name] = dest
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(cfg.Source, 0)))
	if err != nil {
		return nil, fmt.Errorf("fabric: a datagram socket on %s: %v", cfg.Source, err)
	}
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	c.conn, c.pconn = conn, ipv4.NewPacketConn(conn)
	c.streams = newStreamLinks(cfg.Source)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, f := range []func(){c.sendLoop, c.receiveLoop, c.timerLoop} {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); f() }()
	}
	return c, nil
}

// Close stops the client; calls in flight end with an error.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	calls := make([]*Call, 0, len(c.pending))
	for _, call := range c.pending {
		calls = append(calls, call)
	}
	clear(c.pending)
	c.mu.Unlock()
	c.cancel()
	c.conn.Close()
	c.wg.Wait()
	c.streams.close()
	for _, call := range calls {
		c.finish(call, Result{Err: &Error{Msg: "the client closed before a reply came"}})
	}
}

// Stats are the client's counters.
func (c *Client) Stats() Stats {
	return Stats{Requests: c.requests.Load(), Hits: c.hits.Load(), Copies: c.copies.Load(),
		Ignored: c.ignored.Load(), Timeouts: c.timeouts.Load(), Streamed: c.streamed.Load()}
}

// Server is the storage server that owns key.
func (c *Client) Server(key []byte) string { return c.cfg.Cluster.ServerForKey(c.digest(key)) }

func (c *Client) digest(key []byte) [dc.DigestLen]byte {
	d, _ := c.digesters.Get().(*wire.Digester)
	if d == nil {
		d = wire.NewDigester(c.cfg.Cluster.Secret)
	}
	sum := d.Sum(key)
	c.digesters.Put(d)
	return sum
}

// Do sends r and waits for its result.
func (c *Client) Do(r Request) Result { return c.Go(r).Wait() }

// Go sends r and returns at once (after waiting for room, past MaxInFlight requests in flight).
func (c *Client) Go(r Request) *Call {
	call := &Call{c: c, req: r, done: make(chan struct{})}
	size := len(r.Value) + wire.ArgsLen(r.Args)
	if len(r.Key) > dc.MaxKey {
		call.res.Err = &Error{Status: dc.StatusTooLarge, Msg: fmt.Sprintf("a key of %d bytes exceeds the %d a key "+
			"may have", len(r.Key), dc.MaxKey)}
		close(call.done)
		return call
	}
	slack := 0
	if len(r.Args) > 0 {
		slack = dc.FrameSlack
	}
	if size > dc.MaxValue+slack {
		call.res.Err = &Error{Status: dc.StatusTooLarge, Msg: fmt.Sprintf("a %d-byte value exceeds the %d MB a "+
			"value may have (Redis' proto-max-bulk-len)", size, dc.MaxValue>>20)}
		close(call.done)
		return call
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.ctx.Done():
		call.res.Err = &Error{Msg: "the client is closed"}
		close(call.done)
		return call
	}
	c.requests.Add(1)
	digest := c.digest(r.Key)
	call.server = c.cfg.Cluster.ServerForKey(digest)
	call.dest = c.dests[call.server]
	call.addr = net.UDPAddrFromAddrPort(call.dest)
	call.msg = wire.Message{Op: r.Op, Key: r.Key, Digest: digest, Seq: c.seq.Add(1), Value: r.Value, Args: r.Args}
	data, err := call.msg.Encode()
	if err != nil {
		c.finish(call, Result{Err: &Error{Status: dc.StatusTooLarge, Msg: err.Error()}})
		return call
	}
	call.data = data
	if len(data) > dc.MaxDatagram {
		c.goStream(call, time.Now())
		return call
	}
	now := time.Now()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.finish(call, Result{Err: &Error{Msg: "the client is closed"}})
		return call
	}
	c.pending[call.msg.Seq] = call
	call.sched = schedule{rto: c.rtoFor(call.dest, r.Op != dc.OpGet), retries: c.cfg.Retries}
	c.sendCopyLocked(call, now)
	c.mu.Unlock()
	return call
}

func (c *Client) rtoFor(dest netip.AddrPort, write bool) *rto {
	k := rtoKey{dest, write}
	r := c.rtos[k]
	if r == nil {
		r = newRTO(c.cfg.Timeout, c.cfg.MinTimeout, c.cfg.Timeout)
		c.rtos[k] = r
	}
	return r
}

// sendCopyLocked queues call's next copy (its attempt number in the flags) and times it; false: it gave up.
func (c *Client) sendCopyLocked(call *Call, now time.Time) bool {
	until, ok := call.sched.nextCopy(now)
	if !ok {
		return false
	}
	data := call.data
	if attempt := call.sched.sent - 1; attempt > 0 { // a copy of its own: the first may still be queued
		data = slices.Clone(data)
		data[dc.OffFlags] = attemptFlags(attempt)
	}
	call.copySent = now
	c.copies.Add(1)
	c.out = append(c.out, ipv4.Message{Buffers: [][]byte{data}, Addr: call.addr})
	select {
	case c.sendWake <- struct{}{}:
	default:
	}
	earliest := len(c.timers) == 0 || until.Before(c.timers[0].at)
	heap.Push(&c.timers, timer{until, call, call.sched.sent})
	if earliest {
		select {
		case c.timerWake <- struct{}{}:
		default:
		}
	}
	return true
}

// attemptFlags is wire.attempt_flags: attempts past the field's 7 carry 2..7 again (each to the server).
func attemptFlags(attempt int) uint8 {
	maxAttempt := dc.FlagAttempt >> dc.AttemptShift
	if attempt > maxAttempt {
		attempt = 2 + (attempt-2)%(maxAttempt-1)
	}
	return uint8(attempt << dc.AttemptShift)
}

func (c *Client) sendLoop() {
	var spare []ipv4.Message
	for {
		select {
		case <-c.sendWake:
		case <-c.ctx.Done():
			return
		}
		c.mu.Lock()
		batch := c.out
		c.out = spare[:0]
		c.mu.Unlock()
		for sent := 0; sent < len(batch); {
			n, err := c.pconn.WriteBatch(batch[sent:min(len(batch), sent+batchSize)], 0)
			if err != nil {
				if c.ctx.Err() != nil {
					return
				}
				sent++ // this copy is lost (e.g. no route); its timer sends it again
				continue
			}
			sent += n
		}
		clear(batch)
		spare = batch
	}
}

func (c *Client) receiveLoop() {
	msgs := make([]ipv4.Message, batchSize)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 1<<16)}
	}
	for {
		n, err := c.pconn.ReadBatch(msgs, 0)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			continue
		}
		now := time.Now()
		for _, m := range msgs[:n] {
			addr, _ := m.Addr.(*net.UDPAddr)
			if addr == nil {
				continue
			}
			c.onDatagram(m.Buffers[0][:m.N], addr.AddrPort(), now)
		}
	}
}

// matches: m is the reply to req (same seq, digest, reply op, and key when it carries one).
func matches(req *wire.Message, m *wire.Message) bool {
	return m.Seq == req.Seq && m.Digest == req.Digest && m.Op == wire.ReplyOp(req.Op) &&
		(len(m.Key) == 0 || string(m.Key) == string(req.Key))
}

func (c *Client) onDatagram(data []byte, src netip.AddrPort, now time.Time) {
	m, err := wire.Decode(data)
	if err != nil {
		c.ignored.Add(1)
		return
	}
	c.mu.Lock()
	call := c.pending[m.Seq]
	if call == nil || call.dest != netip.AddrPortFrom(src.Addr().Unmap(), src.Port()) || !matches(&call.msg, m) {
		c.mu.Unlock()
		c.ignored.Add(1)
		return
	}
	delete(c.pending, m.Seq)
	call.sched.replied(now)
	c.mu.Unlock()
	if m.Status == dc.StatusStream { // the reply does not fit a datagram: ask again on the stream path
		c.goStream(call, call.sched.start)
		return
	}
	c.finish(call, c.result(call, m))
}

func (c *Client) timerLoop() {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var expired []*Call
		c.mu.Lock()
		now := time.Now()
		for len(c.timers) > 0 && !c.timers[0].at.After(now) {
			e := heap.Pop(&c.timers).(timer)
			call := e.call
			if c.pending[call.msg.Seq] != call || e.copy != call.sched.sent {
				continue // answered, or another copy is timed
			}
			call.sched.timedOut()
			if !c.sendCopyLocked(call, now) {
				delete(c.pending, call.msg.Seq)
				expired = append(expired, call)
			}
		}
		next := time.Hour
		if len(c.timers) > 0 {
			next = c.timers[0].at.Sub(now)
		}
		c.mu.Unlock()
		for _, call := range expired {
			c.timeouts.Add(1)
			c.finish(call, Result{Err: &Error{Timeout: true, Msg: fmt.Sprintf("no reply to %s from storage server %s "+
				"(%s) after %d attempts in %.3gs: its outcome is unknown (it may still take effect); is the storage "+
				"server up and reachable?", call.msg.Op, call.server, call.dest, call.sched.sent,
				call.sched.deadline.Sub(call.sched.start).Seconds())}})
		}
		t.Reset(next)
		select {
		case <-t.C:
		case <-c.timerWake:
		case <-c.ctx.Done():
			return
		}
	}
}

// result is what reply m says of call (client_lib/client.py's _reply).
func (c *Client) result(call *Call, m *wire.Message) Result {
	op := call.msg.Op
	words := func() string {
		if len(m.Value) == 0 {
			return ""
		}
		w := string(m.Value)
		for _, p := range []string{"-ERR ", "-"} {
			if len(w) >= len(p) && w[:len(p)] == p {
				w = w[len(p):]
				break
			}
		}
		for len(w) > 0 && (w[len(w)-1] == '\n' || w[len(w)-1] == '\r') {
			w = w[:len(w)-1]
		}
		return ": " + w
	}
	switch m.Status {
	case dc.StatusBusy:
		why := words()
		if why == "" {
			why = ": it has no room to remember the write for its retry span"
		}
		return Result{Server: call.server, Err: &Error{Status: m.Status, Value: m.Value, Msg: fmt.Sprintf(
			"storage server %s answered BUSY to %s%s; not applied, try again later", call.server, op, why)}}
	case dc.StatusStream:
		return Result{Server: call.server, Err: &Error{Status: m.Status, Msg: fmt.Sprintf(
			"storage server %s redirected %s on the stream path", call.server, op)}}
	case dc.StatusError, dc.StatusBadRequest, dc.StatusTooLarge:
		return Result{Server: call.server, Err: &Error{Status: m.Status, Value: m.Value, Msg: fmt.Sprintf(
			"storage server %s answered %s to %s%s", call.server, m.Status, op, words())}}
	case dc.StatusWrongType:
		if m.Op == dc.OpGetReply {
			return Result{Server: call.server, Err: &Error{Status: m.Status, Value: m.Value, Msg: string(m.Value)}}
		}
	}
	r := Result{Status: m.Status, Cached: m.Flags&dc.FlagCached != 0, ServedBy: m.ServedBy, Server: call.server}
	if (m.Op == dc.OpGetReply || m.Op == dc.OpExecReply) && m.Status != dc.StatusNotFound {
		r.Value = m.Value
	}
	if r.Cached {
		c.hits.Add(1)
	}
	return r
}

func (c *Client) finish(call *Call, r Result) {
	if r.Server == "" {
		r.Server = call.server
	}
	call.res = r
	close(call.done)
	<-c.slots
}
