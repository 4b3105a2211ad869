package main

// The stream path: what does not fit a datagram, over TCP to the shim's own port (docs/protocol.md, "The
// stream path"). Each frame is a message's length (u32), then the message; the request inside is the datagram
// path's in every respect (the same identity, dedup, key lock and coherence) and its reply comes back framed
// on the same connection. One connection carries one request at a time. Memory is bounded by one byte budget
// every connection shares: a frame reserves its length before its body is read, a GET the value's length
// (STRLEN) before it is read, a reply its bytes until written. What finds no room is answered BUSY (a write
// through the BUSY refusal, recorded) and its body skipped unread; what could never fit is answered TOO_LARGE,
// and a frame longer than that closes the connection after the answer (its body read and dropped).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

const (
	maxStreams  = 1024             // connections at once; more are closed at once (counted)
	streamStall = 10 * time.Second // a frame's body (or a reply being written) may go this long without progress
	streamIdle  = 60 * time.Second // a connection may wait this long between frames
	piece       = 1 << 20          // bytes read at a time: a skipped body is never held whole
	streamFull  = "the server's stream budget is full"
)

type budget struct {
	mu          sync.Mutex
	limit, used int64
}

func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) charge(n int64) { b.mu.Lock(); b.used += n; b.mu.Unlock() }
func (b *budget) give(n int64)   { b.mu.Lock(); b.used -= n; b.mu.Unlock() }

type streamServer struct {
	s        *Shim
	budget   *budget
	maxValue int64
	maxFrame int64
	stall    time.Duration
	idle     time.Duration
	lis      *net.TCPListener
	mu       sync.Mutex
	open     map[net.Conn]bool
	wg       sync.WaitGroup
}

func newStreamServer(s *Shim, limit, maxValue int64, stall, idle time.Duration) *streamServer {
	return &streamServer{s: s, budget: &budget{limit: limit}, maxValue: maxValue, stall: stall, idle: idle,
		maxFrame: min(dc.MaxKey+maxValue+dc.FrameSlack, limit), open: map[net.Conn]bool{}}
}

func (t *streamServer) usage() (used, limit int64, conns int) {
	t.budget.mu.Lock()
	used, limit = t.budget.used, t.budget.limit
	t.budget.mu.Unlock()
	t.mu.Lock()
	conns = len(t.open)
	t.mu.Unlock()
	return
}

func (t *streamServer) start(ip net.IP, port int) error {
	lis, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: ip, Port: port})
	if err != nil {
		return err
	}
	t.lis = lis
	t.wg.Add(1)
	go t.accept()
	return nil
}

func (t *streamServer) close() {
	if t.lis != nil {
		t.lis.Close()
	}
	t.mu.Lock()
	for c := range t.open {
		c.Close()
	}
	t.mu.Unlock()
	t.wg.Wait()
}

func (t *streamServer) accept() {
	defer t.wg.Done()
	for {
		c, err := t.lis.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			slog.Debug("stream accept", "err", err)
			time.Sleep(10 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		t.mu.Lock()
		if len(t.open) >= maxStreams {
			t.mu.Unlock()
			t.s.count(t.s.errors, "stream_connections")
			c.Close()
			continue
		}
		t.open[c] = true
		t.mu.Unlock()
		t.wg.Add(1)
		go t.serve(c)
	}
}

// streamPeer is a reply's destination on the stream path (the request's identity is (ip, seq) on either).
type streamPeer struct {
	t    *streamServer
	conn *net.TCPConn
	addr *net.TCPAddr
}

func (p *streamPeer) ip() netip.Addr { return addrOf(p.addr.IP) }

// send writes a reply framed, its bytes charged to the budget until the connection took them.
func (p *streamPeer) send(data []byte) {
	n := int64(len(data))
	p.t.budget.charge(n)
	defer p.t.budget.give(n)
	_ = p.conn.SetWriteDeadline(time.Now().Add(p.t.stall + time.Duration(n>>20)*time.Second))
	head := binary.BigEndian.AppendUint32(nil, uint32(len(data))) // the frame's length, then the message as it is
	bufs := net.Buffers{head, data}
	if _, err := bufs.WriteTo(p.conn); err != nil {
		slog.Debug("stream reply lost", "peer", p.addr, "err", err)
	}
}

func (t *streamServer) serve(c *net.TCPConn) {
	defer t.wg.Done()
	defer func() {
		t.mu.Lock()
		delete(t.open, c)
		t.mu.Unlock()
		c.Close()
	}()
	p := &streamPeer{t: t, conn: c, addr: c.RemoteAddr().(*net.TCPAddr)}
	for {
		more, err := t.one(p)
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, os.ErrDeadlineExceeded):
				t.s.count(t.s.malformed, "stalled")
			case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
				t.s.count(t.s.malformed, "truncated")
			default:
				slog.Debug("stream connection", "peer", p.addr, "err", err)
			}
			return
		}
		if !more {
			return
		}
	}
}

func (t *streamServer) readFull(c *net.TCPConn, buf []byte, timeout time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.ReadFull(c, buf)
	return err
}

// one serves the connection's next frame; false when the connection is to end (the client closed it
// between frames, it idled, or sent a frame no peer of this version sends).
func (t *streamServer) one(p *streamPeer) (bool, error) {
	var lenBuf [4]byte
	_ = p.conn.SetReadDeadline(time.Now().Add(t.idle))
	if got, err := io.ReadFull(p.conn, lenBuf[:]); err != nil {
		var ne net.Error
		if got == 0 && (errors.Is(err, io.EOF) || (errors.As(err, &ne) && ne.Timeout())) {
			return false, nil // closed between frames (the normal end), or idle
		}
		return false, err
	}
	n := int64(binary.BigEndian.Uint32(lenBuf[:]))
	s := t.s
	if n > t.maxFrame {
		head := make([]byte, min(n, dc.HeaderLen))
		if err := t.readFull(p.conn, head, t.stall); err != nil {
			return false, err
		}
		s.count(s.malformed, "frame")
		if answer := wire.Refusal(head, &wire.Error{Reason: "too_large"}); answer != nil {
			t.answer(answer, p, fmt.Sprintf("a frame of %d bytes exceeds this server's %d", n, t.maxFrame))
		}
		// the rest is read and dropped before the connection closes: closed with bytes unread, the connection
		// would be reset, and a client still sending could lose the answer
		return false, t.skip(p.conn, n-int64(len(head)))
	}
	if !t.budget.take(n) {
		head := make([]byte, min(n, dc.HeaderLen))
		if err := t.readFull(p.conn, head, t.stall); err != nil {
			return false, err
		}
		if err := t.skip(p.conn, n-int64(len(head))); err != nil {
			return false, err
		}
		t.busy(head, p)
		return true, nil
	}
	defer t.budget.give(n) // the request's bytes stay reserved until it is served
	body := make([]byte, n)
	for at := int64(0); at < n; at += piece {
		if err := t.readFull(p.conn, body[at:min(n, at+piece)], t.stall); err != nil {
			return false, err
		}
	}
	t.request(body, p)
	return true, nil
}

func (t *streamServer) skip(c *net.TCPConn, n int64) error {
	for n > 0 {
		_ = c.SetReadDeadline(time.Now().Add(t.stall))
		got, err := io.CopyN(io.Discard, c, min(n, piece))
		n -= got
		if err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

func (t *streamServer) request(body []byte, p *streamPeer) {
	s, received := t.s, time.Now()
	m := s.decode(body, p)
	if m == nil {
		return
	}
	if !wire.IsRequest(m.Op) { // coherence is the switches' and the shim's
		s.count(s.malformed, "unexpected_op")
		return
	}
	var reserved int64
	if m.Op == dc.OpGet {
		var ok bool
		if reserved, ok = t.valueRoom(m, p); !ok {
			return // answered: no room for the value
		}
	}
	defer t.budget.give(reserved)
	s.onMessage(m, p, received, nil)
}

// valueRoom reserves the length of the value a GET will read (false: answered BUSY or TOO_LARGE instead).
func (t *streamServer) valueRoom(m *wire.Message, p *streamPeer) (int64, bool) {
	s := t.s
	size, err := s.store.data.Do(s.ctx, s.store.data.B().Strlen().Key(string(m.Key)).Build()).AsInt64()
	if err != nil {
		size = 0 // another type (WRONGTYPE) or Redis unreachable: the read itself answers
	}
	if size+dc.HeaderLen+int64(len(m.Key)) > t.budget.limit {
		t.reply(m, p, dc.StatusTooLarge, fmt.Sprintf("a %d-byte value exceeds this server's stream budget", size))
		return 0, false
	}
	if !t.budget.take(size) {
		s.count(s.errors, "stream_busy")
		t.reply(m, p, dc.StatusBusy, streamFull)
		return 0, false
	}
	return size, true
}

// busy answers a frame the budget has no room for, whose header is head: BUSY, a write through the shim's
// BUSY refusal (recorded in Redis, so no later copy applies it; a copy of a write the shim knows gets what
// that write got).
func (t *streamServer) busy(head []byte, p *streamPeer) {
	s := t.s
	h, bad := wire.ReadHeader(head)
	if bad != "" {
		s.count(s.malformed, bad)
		return
	}
	m := &wire.Message{Op: h.Op, Digest: h.Digest, Seq: h.Seq}
	switch {
	case h.Op == dc.OpGet:
		s.count(s.errors, "stream_busy")
		t.reply(m, p, dc.StatusBusy, streamFull)
	case wire.IsRequest(h.Op):
		s.refuseUnread(m, p, time.Now())
	default:
		s.count(s.malformed, "unexpected_op")
	}
}

func (t *streamServer) reply(m *wire.Message, p *streamPeer, status dc.Status, why string) {
	r := m.Reply(status, nil)
	t.answer(&r, p, why)
}

// answer sends answer with why as its value (a RESP error, as an EXEC's refusal is worded); a refusal
// (TOO_LARGE, BAD_REQUEST) is counted as the datagram path counts it.
func (t *streamServer) answer(answer *wire.Message, p *streamPeer, why string) {
	answer.Value = []byte("-ERR " + why)
	if answer.Status == dc.StatusTooLarge || answer.Status == dc.StatusBadRequest {
		t.s.count(t.s.refused, answer.Status.String())
	}
	if data, err := answer.Encode(); err == nil {
		p.send(data)
	}
}

// refuseUnread: a write the stream path had no room to read (m: its header) is BUSY as a write the dedup
// table has no room for, unless a copy of it is known (in progress: dropped; applied: its reply again).
func (s *Shim) refuseUnread(m *wire.Message, p peer, received time.Time) {
	rid := requestID{p.ip(), m.Seq}
	s.mu.Lock()
	state, done := s.dedup.peek(rid)
	if s.refusing[rid] {
		state = dedupPending
	}
	if state != dedupNew {
		s.knownCopyLocked(state, done, p)
		return
	}
	s.mu.Unlock()
	s.refuseBusy(m, p, rid, received, "stream_busy", streamFull)
}
