package main

// A request served alone (a goroutine of its own, or the stream connection's): every write of a cached key,
// a write whose key's lock was held, EXEC, and whatever the rate limit delays.

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// serve answers one request; a Redis that went away leaves a write unanswered (its outcome unknown).
func (s *Shim) serve(m *wire.Message, p peer, wait time.Duration, received time.Time) {
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return
		}
	}
	replied := false
	answer := s.replier(m, p, received)
	reply := func(status dc.Status, value []byte) {
		replied = true
		answer(status, value)
	}
	var marker string
	if m.Op != dc.OpGet {
		marker = dedupMarker(requestID{p.ip(), m.Seq})
	}
	err := s.handle(m, reply, marker)
	switch {
	case err == nil:
	case isRedisUnavailable(err):
		s.count(s.errors, "redis_unavailable")
		if m.Op == dc.OpGet && !replied {
			reply(dc.StatusError, nil) // a failed read changed nothing
		}
		// a write may or may not have reached Redis before the connection broke: ERROR would claim "nothing
		// written", which may be false, so it gets no answer and its retries are dropped as in progress
		slog.Warn("redis unavailable", "op", m.Op, "err", err)
	default:
		kind := "redis_error"
		if errors.Is(err, errSeqExhausted) {
			kind = "SequenceExhaustedError"
		}
		s.count(s.errors, kind)
		slog.Error("request failed", "op", m.Op, "err", err)
		if !replied {
			s.refuseWrite(m, reply, marker)
		}
	}
}

// refuseWrite answers a request ERROR ("nothing was written") through reply, a write's recorded in Redis first
// like an applied write's marker (marker "": none, a read), so a copy of it reaching a later life of this shim
// is answered ERROR again instead of applied after all. If Redis cannot record it, no answer (the client's
// outcome stays unknown, which is true).
func (s *Shim) refuseWrite(m *wire.Message, reply func(dc.Status, []byte), marker string) {
	if marker != "" {
		existing, ok, err := s.store.refuse(s.ctx, marker, markerError)
		if err != nil {
			s.count(s.errors, "redis_unavailable")
			return
		}
		if ok { // it was applied after all: that outcome stands
			reply(markedStatus(m, existing))
			return
		}
	}
	reply(dc.StatusError, nil)
}

// markedStatus is the answer a write's Redis marker records (a DELETE's says whether the key existed; an
// EXEC's carries its reply).
func markedStatus(m *wire.Message, marker string) (dc.Status, []byte) {
	switch {
	case marker == markerError:
		return dc.StatusError, nil
	case marker == markerBusy:
		return dc.StatusBusy, nil
	case strings.HasPrefix(marker, markerReply):
		resp := []byte(marker[1:])
		return replyStatus(resp), resp
	case m.Op == dc.OpDelete && marker == "0":
		return dc.StatusNotFound, nil
	}
	return dc.StatusOk, nil
}

// replyStatus is an EXEC_REPLY's status: WRONG_TYPE for Redis' WRONGTYPE error, else OK (the reply, a command
// error included, is in the value).
func replyStatus(resp []byte) dc.Status {
	if strings.HasPrefix(string(resp), "-WRONGTYPE") {
		return dc.StatusWrongType
	}
	return dc.StatusOk
}

// serveUnlessApplied: after a restart (or a BUSY refusal) a write whose marker is in Redis was applied (or
// refused) before: answered again, with the status it had.
func (s *Shim) serveUnlessApplied(m *wire.Message, p peer, wait time.Duration, received time.Time) {
	marker, ok, err := s.store.marker(s.ctx, dedupMarker(requestID{p.ip(), m.Seq}))
	if err != nil {
		s.count(s.errors, "redis_unavailable")
		return // no answer: the client retries
	}
	if !ok {
		s.serve(m, p, wait, received)
		return
	}
	s.count(s.duplicates, "replayed_after_restart")
	status, value := markedStatus(m, marker)
	s.reply(m, p, received, status, value)
}

// refuseBusy: the dedup table is full (or, kind "stream_busy", the stream path's budget): the write is refused
// BUSY (not applied), recorded in Redis first as an ERROR is; why goes to the client. The table cannot
// remember this write, so until a retry span after the last refusal every new write id is looked up in Redis
// before it is applied (as after a restart), and finds this refusal's marker.
func (s *Shim) refuseBusy(m *wire.Message, p peer, rid requestID, received time.Time, kind, why string) {
	s.mu.Lock()
	s.errors[kind]++
	if until := time.Now().Add(s.dedup.span); until.After(s.recheckUntil) {
		s.recheckUntil = until
	}
	s.refusing[rid] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.refusing, rid)
		s.mu.Unlock()
	}()
	existing, ok, err := s.store.refuse(s.ctx, dedupMarker(rid), markerBusy)
	if err != nil {
		s.count(s.errors, "redis_unavailable") // no answer: the outcome stays unknown (and nothing ran)
		return
	}
	status, value := dc.StatusBusy, []byte("-ERR "+why)
	if ok {
		status, value = markedStatus(m, existing)
	}
	s.sendUnremembered(m, p, received, status, value)
}

// sendUnremembered answers without the dedup table (which has no room, or never held the write).
func (s *Shim) sendUnremembered(m *wire.Message, p peer, received time.Time, status dc.Status, value []byte) {
	data := encodeReply(m, status, value)
	if data == nil {
		return
	}
	s.mu.Lock()
	s.metrics.replied(m.Op, status, time.Since(received).Seconds())
	s.mu.Unlock()
	p.send(data)
}

// handle serves one request; reply(status, value) answers the client; marker marks a write in Redis.
func (s *Shim) handle(m *wire.Message, reply func(dc.Status, []byte), marker string) error {
	if m.Op == dc.OpGet {
		status, value := s.getOutcome(s.store.do1(s.ctx, s.store.plain(s.store.data.B().Get().Key(string(m.Key)).Build())))
		reply(status, value) // ERROR: Redis failed it (counted by getOutcome); a failed read changed nothing
		return nil
	}
	if m.Op == dc.OpExec {
		if done, err := s.commandWrites(m, reply); err != nil || done {
			return err // refused, or a read command: answered
		}
	}
	unlock := s.locks.lock(m.Digest)
	defer unlock()
	s.mu.Lock()
	cached := s.view.anyHolder(m.Digest)
	var paths []uint8
	if cached {
		paths = s.view.paths(m.Digest)
		if s.limiter != nil {
			// the server's rate pays for coherence too: phase 1 and phase 2 on every path cost a request each
			s.limiter.charge(float64(2 * len(paths)))
		}
	}
	s.mu.Unlock()
	var seq uint64
	if cached {
		// a number only for a write that sends coherence messages: the numbers a life uses per second bound
		// how far ahead of the clock it runs, so none is spent idle
		var err error
		if seq, err = s.coh.nextSeq(); err != nil {
			return err
		}
		began := time.Now()
		live, ok := s.invalidate(m.Digest, seq, paths, nil, m.Key)
		s.observePhase("invalidate", began)
		if !ok {
			s.count(s.errors, "invalidate_timeout")
			s.refuseWrite(m, reply, marker) // copies may still be valid: do not write
			return nil
		}
		paths = live
	}
	var fill []byte
	fillable := false
	switch m.Op {
	case dc.OpExec: // in one script with its marker and a read of what it left of the key
		keys := []string{string(m.Key)}
		if marker != "" {
			keys = append(keys, marker)
		}
		args := []string{itoa(s.store.markerMS), itoa(markerDB), itoa(userDB)}
		for _, a := range m.Args {
			args = append(args, string(a))
		}
		resp, kind, value, ttl, err := s.runCommand(keys, args)
		if err != nil {
			return err
		}
		reply(replyStatus(resp), resp)                                      // safe before phase 2: every copy is invalid
		fill, fillable = value, kind == "string" && ttl < 0 && value != nil // a TTL'd key is never cached
	default:
		w := []pendingWrite{{m, marker}}
		o := s.writeOutcomes(w, s.store.do(s.ctx, s.appendWrites(nil, w)))[0]
		if o.err != nil {
			return o.err
		}
		reply(o.status, nil) // safe before phase 2: every copy is invalid
		if m.Op == dc.OpPut {
			fill, fillable = m.Value, true
		}
	}
	if cached && fillable && len(fill) <= dc.MaxCacheable {
		began := time.Now()
		s.coh.updatePaths(m.Digest, seq, fill, paths, m.Key) // still under the key's lock
		s.observePhase("update", began)
	}
	return nil
}

func (s *Shim) observePhase(phase string, began time.Time) {
	s.mu.Lock()
	s.metrics.phases.observe(phase, time.Since(began).Seconds())
	s.mu.Unlock()
}

// invalidate is phase 1 of a key along paths (the coherence paths of the view), with the breaks build's
// hook (ack-before-invalidate).
func (s *Shim) invalidate(key digest, seq uint64, paths []uint8, tag *[2]uint32, name []byte) ([]uint8, bool) {
	leafHolds := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.view.holders(key)[s.view.leafID]
		return ok
	}
	return breakInvalidate(tag, paths, func() ([]uint8, bool) {
		return s.coh.invalidatePaths(key, seq, paths, tag, name, s.server.LeafID, leafHolds)
	})
}

// runCommand runs an EXEC's command with RUN: its RESP reply, the key's type, value (a string's) and PTTL.
func (s *Shim) runCommand(keys, args []string) (resp []byte, kind string, value []byte, ttl int64, err error) {
	arr, err := s.store.do1(s.ctx, s.store.script(runScript, keys, args)).ToArray()
	if err != nil {
		return nil, "", nil, 0, err
	}
	if len(arr) != 4 {
		return nil, "", nil, 0, fmt.Errorf("RUN answered %d values", len(arr))
	}
	resp, _ = arr[0].AsBytes()
	kind, _ = arr[1].ToString()
	value, verr := arr[2].AsBytes()
	if verr != nil {
		value = nil
	}
	ttl, _ = arr[3].AsInt64()
	return resp, kind, value, ttl, nil
}

// commandWrites checks an EXEC: a write command runs as every write does (handle); a refused command or a
// read command is answered here (done: a read never touches a cache).
func (s *Shim) commandWrites(m *wire.Message, reply func(dc.Status, []byte)) (bool, error) {
	cmd, err := s.cmds.check(s.ctx, s.store.data, m.Args, m.Key)
	var ref refusal
	if errors.As(err, &ref) {
		s.mu.Lock()
		s.refused[dc.StatusBadRequest.String()]++
		s.errors["command_refused"]++
		s.mu.Unlock()
		reply(dc.StatusBadRequest, refusalReply(ref.why))
		return true, nil
	}
	if err != nil {
		return true, err
	}
	if cmd.write {
		return false, nil
	}
	args := []string{"0", "0", "0"}
	for _, a := range m.Args {
		args = append(args, string(a))
	}
	resp, _, _, _, err := s.runCommand([]string{string(m.Key)}, args)
	if err != nil {
		return true, err
	}
	reply(replyStatus(resp), resp)
	return true, nil
}
