package fabric

// The stream path (client_lib/stream.py): a request too large for a datagram, or whose reply came back
// STREAM, framed (u32 length, then the message) on a TCP connection to the same server's DistCache port,
// with the same seq, so the server's dedup knows a write on either path. A connection carries one request at
// a time and is kept for the next (a few per server); a copy is sent again, on a new connection, only when
// the connection broke or no reply came within the copy's time, and while the server's dedup still knows it.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

const (
	rateFloor     = 4 << 20 // bytes per second a stream copy is given at least
	maxReply      = dc.MaxKey + dc.MaxValue + dc.FrameSlack
	idlePerServer = 4
)

var errBroken = errors.New("the server closed the connection or sent what is no frame")

type streamLinks struct {
	dialer net.Dialer
	mu     sync.Mutex
	idle   map[netip.AddrPort][]net.Conn
	closed bool
}

func newStreamLinks(source netip.Addr) *streamLinks {
	return &streamLinks{dialer: net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(source, 0))},
		idle: map[netip.AddrPort][]net.Conn{}}
}

func (s *streamLinks) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, conns := range s.idle {
		for _, c := range conns {
			c.Close()
		}
	}
	clear(s.idle)
}

func (s *streamLinks) take(dest netip.AddrPort) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := s.idle[dest]
	if len(conns) == 0 {
		return nil
	}
	c := conns[len(conns)-1]
	s.idle[dest] = conns[:len(conns)-1]
	return c
}

// keep puts conn back for the next request (not after TOO_LARGE: the server closes the connection then).
func (s *streamLinks) keep(dest netip.AddrPort, conn net.Conn, reply *wire.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.idle[dest]) >= idlePerServer || reply.Status == dc.StatusTooLarge {
		conn.Close()
		return
	}
	s.idle[dest] = append(s.idle[dest], conn)
}

// exchange sends data (req, framed) and returns its reply; a kept connection the server closed meanwhile is
// replaced by a new one (the same copy).
func (s *streamLinks) exchange(dest netip.AddrPort, req *wire.Message, data []byte, idle time.Duration) (*wire.Message, error) {
	if conn := s.take(dest); conn != nil {
		if m, err := s.over(dest, conn, req, data, idle); err == nil {
			return m, nil
		}
	}
	conn, err := s.dialer.Dial("tcp", dest.String())
	if err != nil {
		return nil, err
	}
	return s.over(dest, conn, req, data, idle)
}

func (s *streamLinks) over(dest netip.AddrPort, conn net.Conn, req *wire.Message, data []byte, idle time.Duration) (*wire.Message, error) {
	first := idle + time.Duration(float64(len(data))/rateFloor*float64(time.Second))
	kept := false
	defer func() {
		if !kept {
			conn.Close()
		}
	}()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	_ = conn.SetDeadline(time.Now().Add(first))
	if _, err := (&net.Buffers{n[:], data}).WriteTo(conn); err != nil {
		return nil, err
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(first))
		if _, err := io.ReadFull(conn, n[:]); err != nil {
			return nil, brokenOr(err)
		}
		size := int(binary.BigEndian.Uint32(n[:]))
		if size > maxReply {
			return nil, fmt.Errorf("a frame of %d bytes from the server", size)
		}
		body := make([]byte, size)
		for at := 0; at < size; {
			_ = conn.SetReadDeadline(time.Now().Add(idle))
			k, err := conn.Read(body[at:min(size, at+1<<20)])
			if err != nil {
				return nil, brokenOr(err)
			}
			at += k
		}
		m, err := wire.DecodeInPlace(body)
		if err == nil && matches(req, m) {
			_ = conn.SetDeadline(time.Time{})
			kept = true
			s.keep(dest, conn, m)
			return m, nil
		}
	}
}

func brokenOr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errBroken
	}
	return err
}

// goStream serves call on the stream path in a goroutine of its own, sent again on a new connection while
// the client's retries allow and the server's dedup still knows the first copy.
func (c *Client) goStream(call *Call, start time.Time) {
	c.streamed.Add(1)
	go func() {
		call.msg.Flags = dc.FlagStream
		data, err := call.msg.Encode()
		if err != nil {
			c.finish(call, Result{Err: &Error{Status: dc.StatusTooLarge, Msg: err.Error()}})
			return
		}
		span := time.Duration(dc.RetrySpanSeconds * float64(time.Second))
		for attempts := 1; ; attempts++ {
			sent := time.Now()
			m, err := c.streams.exchange(call.dest, &call.msg, data, c.cfg.Timeout)
			if err == nil {
				r := c.result(call, m)
				if m.Status == dc.StatusStream {
					r = Result{Err: &Error{Status: m.Status, Msg: fmt.Sprintf("storage server %s redirected %s on "+
						"the stream path itself", call.server, call.msg.Op)}}
				}
				c.finish(call, r)
				return
			}
			if attempts > c.cfg.Retries || time.Since(start) >= span/2 || c.ctx.Err() != nil {
				c.timeouts.Add(1)
				c.finish(call, Result{Err: &Error{Timeout: true, Msg: fmt.Sprintf("no reply to %s from storage "+
					"server %s (%s) on the stream path (TCP) after %d attempts: %v; its outcome is unknown (it may "+
					"still take effect); is the storage server up and reachable?", call.msg.Op, call.server,
					call.dest, attempts, err)}})
				return
			}
			select { // a refused connection fails at once: copies leave at least a timeout apart
			case <-time.After(time.Until(sent.Add(c.cfg.Timeout))):
			case <-c.ctx.Done():
			}
		}
	}()
}
