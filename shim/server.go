package main

// The storage-server shim: DistCache over UDP (and the stream path over TCP) in front of one redis-server.
//
// It answers GET/PUT/DELETE/EXEC from clients out of its Redis, runs the coherence protocol for keys some
// switch caches, and fills caches on request of the switch agents (docs/protocol.md). A request carries the
// user's key and its digest (what switches know it by): the shim checks that they agree.
//
// Concurrency (docs/protocol.md, "The shim's atomic steps", maps each to model/distcache.m): a few batch
// workers each read a batch of datagrams at once (recvmmsg), turn the reads and the writes of uncached keys
// into one pipeline to Redis (one round trip per batch) and send the replies at once (sendmmsg); what must
// wait (a write of a cached key, which runs both coherence phases; a key whose lock is held; a write the
// rate limit delays) is served by a goroutine of its own. The shim's bookkeeping (view, dedup, names,
// counters) is under one mutex, held only between Redis round trips; a key's writes and populates are
// serialized by the key's lock, under which every write checks whether the key is cached.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"

	"distcache/internal/cluster"
	"distcache/internal/dc"
	"distcache/internal/wire"
)

const (
	maxInFlight  = 4096 // requests being served at once; beyond, new ones are dropped and counted
	batchWorkers = 1    // default: goroutines reading datagram batches (each one Redis round trip at a time)
	batchSize    = 64   // datagrams read (and replies sent) per system call
	readBuffer   = 1 << 16
)

// peer is where a reply goes: a datagram's source, or a stream connection.
type peer interface {
	ip() netip.Addr
	send(data []byte)
}

type udpPeer struct {
	s    *Shim
	addr *net.UDPAddr
}

func (p udpPeer) ip() netip.Addr { return addrOf(p.addr.IP) }

// addrOf is an IP as the request identity and the dedup marker name it: IPv4 as IPv4 (never v4-mapped v6).
func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

// send a reply as a datagram; one too large for a datagram is redirected to the stream path.
func (p udpPeer) send(data []byte) { p.s.sendDatagram(redirectIfLarge(data), p.addr) }

func redirectIfLarge(data []byte) []byte {
	if len(data) <= dc.MaxDatagram {
		return data
	}
	m, err := wire.Decode(data)
	if err != nil {
		return data
	}
	r := wire.Redirect(m)
	out, _ := r.Encode()
	return out
}

type counter map[string]uint64

// Shim is one storage server's shim.
type Shim struct {
	opts    *Options
	cluster *cluster.Cluster
	server  *cluster.Server
	store   *store
	conn    *net.UDPConn
	pconn   *ipv4.PacketConn
	locks   *keyLocks
	coh     *coherence
	cmds    commandTable
	metrics *metrics
	stream  *streamServer
	saving  sync.Mutex // one state-file write at a time
	// keyed hashes for the digest check of every request
	digesters sync.Pool
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	inFlight atomic.Int64
	batches  atomic.Int64 // batches sent to Redis, and the requests they carried (the exit log's mean)
	batched  atomic.Int64

	mu            sync.Mutex // everything below
	view          *cacheView
	dedup         *dedup
	names         *keyNames
	limiter       *tokenBucket
	requests      counter
	malformed     counter
	refused       counter // malformed requests answered TOO_LARGE or BAD_REQUEST
	errors        counter
	duplicates    counter // retried writes not applied again: replayed / in_progress / replayed_after_restart
	resynced      counter // cached copies populated again after a Redis restart, by outcome
	evicted       counter // cached keys Redis evicted, invalidated
	refusing      map[requestID]bool
	recheckUntil  time.Time // until then, new write ids are looked up in Redis (a restart, a BUSY refusal)
	redisRunID    string
	redisDown     bool
	redisRestarts uint64
}

func newShim(o *Options, c *cluster.Cluster, srv *cluster.Server) *Shim {
	s := &Shim{opts: o, cluster: c, server: srv, locks: newKeyLocks(), coh: newCoherence(), metrics: newMetrics(),
		view: newCacheView(srv, o.Fresh), dedup: newDedup(o.DedupMemory, o.DedupSpan), names: newKeyNames(),
		requests: counter{}, malformed: counter{}, refused: counter{}, errors: counter{}, duplicates: counter{},
		resynced: counter{}, evicted: counter{}, refusing: map[requestID]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if c.ServerRate > 0 {
		s.limiter = newTokenBucket(c.ServerRate, c.ServerBurst)
	}
	var peerAddr *net.UDPAddr
	if o.CoherencePeer != "" {
		peerAddr, _ = net.ResolveUDPAddr("udp4", o.CoherencePeer)
	}
	s.coh.send = s.sendDatagram
	s.coh.isDown = func(sw uint8) bool { s.mu.Lock(); defer s.mu.Unlock(); _, d := s.view.down[sw]; return d }
	s.coh.address = func(sw uint8) *net.UDPAddr {
		if peerAddr != nil {
			return peerAddr
		}
		return &net.UDPAddr{IP: net.ParseIP(cluster.SpineAddress(sw)).To4(), Port: dc.DCPort}
	}
	s.coh.reserveFloor = func(n uint64) error { return s.store.setFloor(s.ctx, n) }
	s.stream = newStreamServer(s, o.StreamBudget, o.MaxValue, o.StreamStall, o.StreamIdle)
	return s
}

// start connects to Redis, reads its command table and the coherence floor, and begins serving.
func (s *Shim) start() error {
	st, err := openStore(s.opts, s.opts.DedupSpan)
	if err != nil {
		return err
	}
	s.store = st
	if err := s.loadState(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if s.cmds, err = loadCommands(ctx, st.data); err != nil {
		return err
	}
	if !s.opts.Fresh { // maybe a restart: clients may still retry writes our previous life applied
		s.recheckUntil = time.Now().Add(s.dedup.span)
	}
	if s.redisRunID, err = st.runID(ctx); err != nil {
		return fmt.Errorf("redis: %v", err)
	}
	floor, err := st.floor(ctx)
	if err != nil {
		return fmt.Errorf("redis: %v", err)
	}
	if err := s.coh.startFrom(floor); err != nil {
		return fmt.Errorf("redis: persisting the coherence floor: %v", err)
	}
	if err := s.listen(); err != nil {
		return err
	}
	s.goBackground(s.watchRedis)
	if policy := st.maxmemoryPolicy(ctx); policy != "" && policy != "noeviction" {
		s.goBackground(s.watchEvictions)
	}
	for i := 0; i < s.opts.BatchWorkers; i++ {
		s.goBackground(s.readLoop)
	}
	return nil
}

// digest is a key's digest under the deployment's secret, with a keyed hash from the pool.
func (s *Shim) digest(key []byte) digest {
	d, _ := s.digesters.Get().(*wire.Digester)
	if d == nil {
		d = wire.NewDigester(s.cluster.Secret)
	}
	sum := d.Sum(key)
	s.digesters.Put(d)
	return sum
}

func (s *Shim) goBackground(f func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
}

// listen opens datagrams and the stream path on one port number (port 0: one both protocols have free).
func (s *Shim) listen() error {
	host := s.opts.Listen
	if host == "" {
		host = s.server.IP
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return fmt.Errorf("--listen %s: the shim serves IPv4 addresses", host)
	}
	for attempt := 0; ; attempt++ {
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: s.opts.Port})
		if err != nil {
			return err
		}
		port := conn.LocalAddr().(*net.UDPAddr).Port
		if err := s.stream.start(ip, port); err != nil {
			conn.Close()
			if s.opts.Port != 0 || attempt == 7 {
				return err
			}
			continue
		}
		_ = conn.SetReadBuffer(4 << 20)
		_ = conn.SetWriteBuffer(4 << 20)
		s.conn, s.pconn, s.opts.Port = conn, ipv4.NewPacketConn(conn), port
		s.opts.Listen = ip.String()
		return nil
	}
}

func (s *Shim) close() {
	s.cancel()
	if s.conn != nil {
		s.conn.Close()
	}
	s.stream.close()
	s.wg.Wait()
	if s.store != nil {
		s.store.close()
	}
}

func (s *Shim) sendDatagram(data []byte, dest *net.UDPAddr) {
	if _, err := s.conn.WriteToUDP(data, dest); err != nil {
		slog.Debug("UDP send", "err", err)
	}
}

func (s *Shim) count(c counter, kind string) {
	s.mu.Lock()
	c[kind]++
	s.mu.Unlock()
}

// readLoop reads datagrams in batches and serves each batch (docs/protocol.md, "The shim's atomic steps").
func (s *Shim) readLoop() {
	msgs := make([]ipv4.Message, batchSize)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, readBuffer)}
	}
	b := newBatch(s)
	for {
		n, err := s.pconn.ReadBatch(msgs, 0)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			slog.Debug("UDP receive", "err", err)
			continue
		}
		received := time.Now()
		for _, m := range msgs[:n] {
			addr, _ := m.Addr.(*net.UDPAddr)
			if addr == nil {
				continue
			}
			s.onDatagram(m.Buffers[0][:m.N], udpPeer{s, addr}, received, b)
		}
		b.flush()
	}
}

// decode is data as a message, or nil: what does not decode is counted by reason, and a request we cannot
// act on is told so at once (wire.Refusal), whichever path it came by.
func (s *Shim) decode(data []byte, p peer) *wire.Message {
	decode := wire.Decode
	if _, stream := p.(*streamPeer); stream {
		decode = wire.DecodeInPlace // a frame's bytes are its own: its value is not copied again
	}
	m, err := decode(data)
	if err == nil {
		return m
	}
	werr := err.(*wire.Error)
	s.mu.Lock()
	s.malformed[werr.Reason]++
	answer := wire.Refusal(data, werr)
	if answer != nil {
		s.refused[answer.Status.String()]++
	}
	s.mu.Unlock()
	if answer != nil {
		if out, err := answer.Encode(); err == nil {
			p.send(out)
		}
	}
	return nil
}

func (s *Shim) onDatagram(data []byte, p udpPeer, received time.Time, b *batch) {
	m := s.decode(data, p)
	switch {
	case m == nil:
	case wire.IsRequest(m.Op):
		s.onMessage(m, p, received, b)
	case m.Op == dc.OpInvalidateAck || m.Op == dc.OpUpdateAck:
		s.coh.onAck(m)
	default:
		s.count(s.malformed, "unexpected_op")
	}
}

// onMessage serves a request that came as a datagram (b: its batch) or on the stream path (b nil: served
// in the caller's goroutine, which waits for it).
func (s *Shim) onMessage(m *wire.Message, p peer, received time.Time, b *batch) {
	forged := s.digest(m.Key) != m.Digest // it could invalidate another key's entry
	s.mu.Lock()
	s.requests[m.Op.String()]++
	if forged {
		s.malformed["digest"]++
		s.refused[dc.StatusBadRequest.String()]++
		s.mu.Unlock()
		s.reply(m, p, received, dc.StatusBadRequest, nil)
		return
	}
	s.names.learn(m.Digest, m.Key)
	if s.inFlight.Load() >= maxInFlight { // bounded work: a flood is dropped, counted
		s.errors["overload"]++
		s.mu.Unlock()
		return
	}
	var wait time.Duration
	if s.limiter != nil {
		w, ok := s.limiter.reserve(s.cluster.ServerQueue)
		if !ok {
			s.errors["rate_limited"]++
			s.mu.Unlock()
			return
		}
		wait = w
		s.metrics.queue.observe(w.Seconds())
	}
	recheck := false
	if m.Op != dc.OpGet {
		rid := requestID{p.ip(), m.Seq}
		if s.refusing[rid] { // a copy of a write being refused BUSY
			s.duplicates["in_progress"]++
			s.mu.Unlock()
			return
		}
		state, done := s.dedup.begin(rid)
		switch state {
		case dedupBusy:
			s.mu.Unlock()
			s.run(b, func() { s.refuseBusy(m, p, rid, received, "busy", busyWhy) })
			return
		case dedupPending, dedupDone:
			s.knownCopyLocked(state, done, p)
			return
		}
		recheck = received.Before(s.recheckUntil) // our memory is younger than a client's retries
	}
	s.mu.Unlock()
	switch {
	case recheck:
		s.run(b, func() { s.serveUnlessApplied(m, p, wait, received) })
	case b != nil && wait == 0 && b.take(m, p, received):
	default:
		s.run(b, func() { s.serve(m, p, wait, received) })
	}
}

// run serves f in a goroutine of its own (a datagram's: the batch goes on) or, for the stream path (b nil),
// in the caller's.
func (s *Shim) run(b *batch, f func()) {
	s.inFlight.Add(1)
	if b == nil {
		defer s.inFlight.Add(-1)
		f()
		return
	}
	go func() {
		defer s.inFlight.Add(-1)
		f()
	}()
}

const busyWhy = "it has no room to remember the write for its retry span"

// knownCopyLocked answers a copy of a write the dedup table knows: dropped while the write runs, else its
// reply again. Called with s.mu held; releases it.
func (s *Shim) knownCopyLocked(state dedupState, done []byte, p peer) {
	if state == dedupDone {
		s.duplicates["replayed"]++
	} else {
		s.duplicates["in_progress"]++
	}
	s.mu.Unlock()
	if state == dedupDone {
		p.send(done)
	}
}

// reply answers m: counted in the metrics, remembered by the dedup table (a write), sent.
func (s *Shim) reply(m *wire.Message, p peer, received time.Time, status dc.Status, value []byte) {
	data := encodeReply(m, status, value)
	if data == nil {
		return
	}
	s.mu.Lock()
	s.metrics.replied(m.Op, status, time.Since(received).Seconds())
	if m.Op != dc.OpGet {
		s.dedup.finish(requestID{p.ip(), m.Seq}, data)
	}
	s.mu.Unlock()
	p.send(data)
}

// replier is reply for m, as the functions that answer through a callback take it.
func (s *Shim) replier(m *wire.Message, p peer, received time.Time) func(dc.Status, []byte) {
	return func(status dc.Status, value []byte) { s.reply(m, p, received, status, value) }
}

// encodeReply is m's reply, encoded (nil, logged, for a value past the wire's limits: Redis holds none under
// --max-value).
func encodeReply(m *wire.Message, status dc.Status, value []byte) []byte {
	r := m.Reply(status, value)
	data, err := r.Encode()
	if err != nil {
		slog.Error("reply does not encode", "err", err)
		return nil
	}
	return data
}
