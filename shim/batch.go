package main

// A batch: the reads, and the writes of keys no switch caches, of the datagrams one system call brought, sent
// to Redis as one pipeline (the reads, then the writes as one MULTI/EXEC with their dedup markers) and answered
// with one sendmmsg. A read takes no lock (it is linearized where Redis runs it); a write joins the batch only
// if it gets its key's lock at once, or the batch holds it already (an earlier write of the same key in this
// batch: Redis runs the transaction's writes in order), and under that lock finds the key uncached: it then
// needs no coherence message. The locks are held until the replies are made, as a write served alone holds
// its own (docs/protocol.md, "The shim's atomic steps"). Anything else is served alone.

import (
	"log/slog"
	"strconv"
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
}

type batch struct {
	s      *Shim
	gets   []batchItem
	writes []batchItem
	held   map[digest]func() // the keys whose locks the batch's writes hold, and how to let each go
	calls  []call
	made   []madeReply
	out    []ipv4.Message
	// the worker's own Redis connection: written and read by the worker, with no hop through rueidis' pipelining
	// goroutines (a batch is one round trip already); replaced after it fails
	conn    rueidis.DedicatedClient
	release func()
}

func newBatch(s *Shim) *batch { return &batch{s: s, held: map[digest]func(){}} }

// take adds a GET, or a PUT or DELETE of an uncached key whose lock is free (or the batch's), to the batch;
// false: serve it alone.
func (b *batch) take(m *wire.Message, p peer, received time.Time) bool {
	if _, ok := p.(udpPeer); !ok {
		return false
	}
	switch m.Op {
	case dc.OpGet:
		b.gets = append(b.gets, batchItem{m, p, received})
		return true
	case dc.OpPut, dc.OpDelete:
		s := b.s
		if _, ours := b.held[m.Digest]; !ours {
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
			b.held[m.Digest] = unlock
		}
		b.writes = append(b.writes, batchItem{m, p, received})
		return true
	}
	return false
}

// flush sends the batch's commands as one pipeline, then every reply with one system call.
func (b *batch) flush() {
	if len(b.gets) == 0 && len(b.writes) == 0 {
		return
	}
	s := b.s
	for _, it := range b.gets {
		// the key's bytes as they are (BinaryString: no copy; a request's key is never changed after decoding)
		b.calls = append(b.calls, s.store.plain(s.store.data.B().Get().Key(rueidis.BinaryString(it.m.Key)).Build()))
	}
	ws := make([]pendingWrite, len(b.writes))
	for i, it := range b.writes {
		ws[i] = pendingWrite{it.m, dedupMarker(requestID{it.p.ip(), it.m.Seq})}
	}
	b.calls = s.appendWrites(b.calls, ws)
	s.batches.Add(1)
	s.batched.Add(int64(len(b.gets) + len(b.writes)))
	results := b.do(b.calls)
	if b.conn == nil && len(b.gets) > 0 { // the connection broke (a Redis restart): the reads again, on a new one
		copy(results, b.do(b.calls[:len(b.gets)])) // (a write's outcome is unknown: it is not sent again)
	}
	for i, it := range b.gets {
		status, value := s.getOutcome(results[i])
		b.add(it, status, value)
	}
	if len(ws) > 0 {
		outcomes := s.writeOutcomes(ws, results[len(b.gets):])
		for i, it := range b.writes {
			o := outcomes[i]
			switch {
			case o.err == nil:
				b.add(it, o.status, nil)
			case isRedisUnavailable(o.err):
				// the write may or may not have reached Redis: no answer (the client's outcome stays unknown)
				s.count(s.errors, "redis_unavailable")
			default: // Redis refused it (e.g. OOM): ERROR, recorded first (after the lock: the write ran not)
				s.count(s.errors, "redis_error")
				slog.Warn("write refused by redis", "op", it.m.Op, "err", o.err)
				go s.refuseWrite(it.m, s.replier(it.m, it.p, it.received), ws[i].marker)
			}
		}
	}
	b.record() // before the locks go: a later write of the key finds this one's reply remembered
	for d, unlock := range b.held {
		unlock()
		delete(b.held, d)
	}
	for sent := 0; sent < len(b.out); {
		n, err := s.pconn.WriteBatch(b.out[sent:], 0)
		if err != nil {
			slog.Debug("UDP send batch", "err", err)
			break
		}
		sent += n
	}
	clear(b.gets)
	clear(b.writes)
	clear(b.calls)
	clear(b.out)
	b.gets, b.writes, b.calls, b.out = b.gets[:0], b.writes[:0], b.calls[:0], b.out[:0]
}

// do runs calls on the worker's own connection, taken anew after one that broke.
func (b *batch) do(calls []call) []rueidis.RedisResult {
	s := b.s
	if b.conn == nil {
		b.conn, b.release = s.store.data.Dedicate()
	}
	results := s.store.doOn(s.ctx, b.conn, calls)
	for _, r := range results {
		if isRedisUnavailable(r.Error()) {
			b.release()
			b.conn = nil
			break
		}
	}
	return results
}

// add makes a reply of the batch (recorded in the metrics and the dedup table by record, all at once).
func (b *batch) add(it batchItem, status dc.Status, value []byte) {
	data := encodeReply(it.m, status, value)
	if data == nil {
		return
	}
	b.made = append(b.made, madeReply{it, status, data})
	b.out = append(b.out, ipv4.Message{Buffers: [][]byte{redirectIfLarge(data)}, Addr: it.p.(udpPeer).addr})
}

type madeReply struct {
	batchItem
	status dc.Status
	data   []byte
}

// record counts the batch's replies and remembers its writes' (under the shim's lock, once per batch).
func (b *batch) record() {
	s, now := b.s, time.Now()
	s.mu.Lock()
	for _, r := range b.made {
		s.metrics.replied(r.m.Op, r.status, now.Sub(r.received).Seconds())
		if r.m.Op != dc.OpGet {
			s.dedup.finish(requestID{r.p.ip(), r.m.Seq}, r.data)
		}
	}
	s.mu.Unlock()
	clear(b.made)
	b.made = b.made[:0]
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

// pendingWrite is a PUT or DELETE on its way to Redis with its dedup marker ("": none).
type pendingWrite struct {
	m      *wire.Message
	marker string
}

type writeOutcome struct {
	status dc.Status
	err    error
}

// appendWrites appends the writes as one MULTI/EXEC: each write, in order (a PUT's SET; a DELETE as one script
// with its marker, which holds whether the key existed), then the PUTs' markers in the markers' database. A
// write and its marker land in one step; so do the writes of one batch.
func (s *Shim) appendWrites(calls []call, ws []pendingWrite) []call {
	if len(ws) == 0 {
		return calls
	}
	st := s.store
	b := st.data.B()
	calls = append(calls, st.plain(b.Multi().Build()))
	ms := strconv.FormatInt(st.markerMS, 10)
	marked := false
	for _, w := range ws {
		key := rueidis.BinaryString(w.m.Key) // no copy: a request's bytes are never changed after decoding
		switch {
		case w.m.Op == dc.OpPut:
			calls = append(calls, st.plain(b.Set().Key(key).Value(rueidis.BinaryString(w.m.Value)).Build()))
			marked = marked || w.marker != ""
		case w.marker == "":
			calls = append(calls, st.plain(b.Del().Key(key).Build()))
		default: // EVAL, not EVALSHA: a NOSCRIPT inside the transaction would leave this write undone alone
			calls = append(calls, st.plain(b.Eval().Script(delWithMarker.body).Numkeys(2).Key(key, w.marker).
				Arg(ms, strconv.Itoa(markerDB), strconv.Itoa(userDB)).Build()))
		}
	}
	if marked {
		calls = append(calls, st.plain(b.Select().Index(markerDB).Build()))
		for _, w := range ws {
			if w.m.Op == dc.OpPut && w.marker != "" {
				calls = append(calls, st.plain(b.Set().Key(w.marker).Value(markerOK).PxMilliseconds(st.markerMS).Build()))
			}
		}
		calls = append(calls, st.plain(b.Select().Index(userDB).Build()))
	}
	return append(calls, st.plain(b.Exec().Build()))
}

// writeOutcomes reads each write's reply from what the transaction's commands answered (results: from its
// MULTI to its EXEC); an error is the write's outcome when Redis did not apply it or cannot say.
func (s *Shim) writeOutcomes(ws []pendingWrite, results []rueidis.RedisResult) []writeOutcome {
	out := make([]writeOutcome, len(ws))
	exec := results[len(results)-1]
	replies, err := exec.ToArray()
	if err == nil && len(replies) < len(ws) {
		err = errShortExec
	}
	for i, w := range ws {
		if err != nil {
			out[i].err = err
			continue
		}
		out[i].status, out[i].err = writeStatus(w.m, replies[i])
	}
	return out
}

// writeStatus is a PUT's or DELETE's reply from what Redis answered for its command.
func writeStatus(m *wire.Message, r rueidis.RedisMessage) (dc.Status, error) {
	if err := r.Error(); err != nil {
		return 0, err
	}
	if m.Op == dc.OpPut {
		return dc.StatusOk, nil
	}
	n, err := r.AsInt64()
	if err != nil {
		return 0, err
	}
	if n > 0 {
		return dc.StatusOk, nil
	}
	return dc.StatusNotFound, nil
}
