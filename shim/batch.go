package main

// A batch: the reads, and the writes of keys no switch caches, of the datagrams one system call brought,
// sent to Redis as one pipeline and answered with one sendmmsg. A read takes no lock (it is linearized where
// Redis runs it); a write joins the batch only if it gets its key's lock at once and, under that lock, finds
// the key uncached: it then needs no coherence message, and its lock is held until its reply is made, as a
// write served alone holds it (docs/protocol.md, "The shim's atomic steps"). Anything else is served alone.

import (
	"log/slog"
	"net"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/net/ipv4"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

type batchItem struct {
	m        *wire.Message
	p        peer
	received time.Time
	unlock   func() // a write's key lock
}

type batch struct {
	s     *Shim
	items []batchItem
	calls []call
	out   []ipv4.Message
}

func newBatch(s *Shim) *batch { return &batch{s: s} }

// take adds a GET, or a PUT or DELETE of an uncached key whose lock is free, to the batch; false: serve it
// alone.
func (b *batch) take(m *wire.Message, p peer, received time.Time) bool {
	if _, ok := p.(udpPeer); !ok {
		return false
	}
	s := b.s
	switch m.Op {
	case dc.OpGet:
		b.items = append(b.items, batchItem{m: m, p: p, received: received})
		b.calls = append(b.calls, s.store.plain(s.store.data.B().Get().Key(string(m.Key)).Build()))
		return true
	case dc.OpPut, dc.OpDelete:
		unlock, ok := s.locks.tryLock(m.Digest)
		if !ok {
			return false
		}
		s.mu.Lock()
		cached := s.view.anyHolder(m.Digest)
		s.mu.Unlock()
		if cached {
			unlock()
			return false
		}
		b.items = append(b.items, batchItem{m: m, p: p, received: received, unlock: unlock})
		b.calls = append(b.calls, s.writeCall(m, dedupMarker(requestID{p.ip(), m.Seq})))
		return true
	}
	return false
}

// flush sends the batch's commands as one pipeline, then every reply with one system call.
func (b *batch) flush() {
	if len(b.items) == 0 {
		return
	}
	s := b.s
	results := s.store.do(s.ctx, b.calls)
	for i, it := range b.items {
		if it.m.Op == dc.OpGet {
			status, value := s.getOutcome(results[i])
			b.add(it, status, value)
			continue
		}
		status, value, err := s.writeOutcome(it.m, results[i])
		switch {
		case err == nil:
			b.add(it, status, value)
			it.unlock()
		case isRedisUnavailable(err):
			// the write may or may not have reached Redis: no answer (the client's outcome stays unknown)
			it.unlock()
			s.count(s.errors, "redis_unavailable")
		default: // Redis refused it (e.g. OOM): ERROR, recorded first, under the key's lock still
			s.count(s.errors, "redis_error")
			slog.Warn("write refused by redis", "op", it.m.Op, "err", err)
			go func() {
				defer it.unlock()
				s.refuseWrite(it.m, it.p, it.received, dedupMarker(requestID{it.p.ip(), it.m.Seq}))
			}()
		}
	}
	if len(b.out) > 0 {
		for sent := 0; sent < len(b.out); {
			n, err := s.pconn.WriteBatch(b.out[sent:], 0)
			if err != nil {
				slog.Debug("UDP send batch", "err", err)
				break
			}
			sent += n
		}
	}
	clear(b.items)
	clear(b.out)
	b.items, b.calls, b.out = b.items[:0], b.calls[:0], b.out[:0]
}

func (b *batch) add(it batchItem, status dc.Status, value []byte) {
	data := b.s.replyBytes(it.m, it.p, it.received, status, value)
	if data == nil {
		return
	}
	p := it.p.(udpPeer)
	b.out = append(b.out, ipv4.Message{Buffers: [][]byte{redirectIfLarge(data)}, Addr: (*net.UDPAddr)(p.addr)})
}

// getOutcome is a GET's reply: the value, NOT_FOUND, WRONG_TYPE (Redis' words) or ERROR (Redis unreachable:
// a failed read changed nothing).
func (s *Shim) getOutcome(r rueidis.RedisResult) (dc.Status, []byte) {
	v, err := r.AsBytes()
	switch {
	case err == nil:
		return dc.StatusOk, v
	case rueidis.IsRedisNil(err):
		return dc.StatusNotFound, nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok && len(re.Error()) >= 9 && re.Error()[:9] == "WRONGTYPE" {
		return dc.StatusWrongType, []byte(wrongTypeReply)
	}
	if isRedisUnavailable(err) {
		s.count(s.errors, "redis_unavailable")
	} else {
		s.count(s.errors, "redis_error")
	}
	return dc.StatusError, nil
}

// writeCall is the Redis command of a PUT or DELETE with its marker (marker "": none).
func (s *Shim) writeCall(m *wire.Message, marker string) call {
	st, key := s.store, string(m.Key)
	ms := itoa(st.markerMS)
	switch {
	case m.Op == dc.OpPut && marker == "":
		return st.plain(st.data.B().Set().Key(key).Value(string(m.Value)).Build())
	case m.Op == dc.OpPut:
		return st.script(setWithMarker, []string{key, marker}, []string{string(m.Value), ms, itoa(markerDB), itoa(userDB)})
	case marker == "":
		return st.plain(st.data.B().Del().Key(key).Build())
	}
	return st.script(delWithMarker, []string{key, marker}, []string{ms, itoa(markerDB), itoa(userDB)})
}

// writeOutcome is a PUT's or DELETE's reply from what Redis answered (an error: not answered here).
func (s *Shim) writeOutcome(m *wire.Message, r rueidis.RedisResult) (dc.Status, []byte, error) {
	if m.Op == dc.OpPut {
		return dc.StatusOk, nil, r.Error()
	}
	n, err := r.AsInt64()
	if err != nil {
		return 0, nil, err
	}
	if n > 0 {
		return dc.StatusOk, nil, nil
	}
	return dc.StatusNotFound, nil, nil
}
