package main

// The two-phase coherence protocol as the storage server runs it (paper §4.3; docs/protocol.md, "Coherence").
// Phase 1 sends an INVALIDATE along each path through the switches that may cache the key (up through the
// storage leaf to a spine, which reflects it as INVALIDATE_ACK, or only to the leaf, which then reflects it)
// and retransmits until the ack comes; only then may the server write and answer. Phase 2 sends an UPDATE
// with the same sequence number and the new value; switches take it only if the last INVALIDATE they saw
// for the slot carried that number, so a late phase 2 of an older write never resurrects an old value.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

const (
	seqBlock    = 1 << 20 // numbers reserved at a time: the floor persisted ahead of the numbers used
	seqFloorKey = dc.SeqFloorKey
)

// serialNewer says whether 64-bit sequence number a is newer than b (RFC 1982), as switches compare them.
func serialNewer(a, b uint64) bool { return a != b && a-b < 1<<63 }

// errSeqExhausted: every reserved number is used and the next reservation has not landed: the write is
// refused (nothing written) rather than given a number a later life could hand out again.
var errSeqExhausted = errors.New("sequence numbers used up to the reserved floor; the next reservation is late")

type exchange int

const (
	acked    exchange = iota // the far end acknowledged: every copy on the path took the message
	released                 // the far end was declared down: its ack never comes, and the path does not count
	timedOut                 // no ack before the deadline
)

type waitKey struct {
	op     dc.Op
	seq    uint64
	target uint8
	digest digest
}

type coherenceStats struct {
	invalidates, updates, retransmits, failedInvalidates, failedUpdates, strayAcks uint64
}

type coherence struct {
	send          func(data []byte, dest *net.UDPAddr)
	isDown        func(sw uint8) bool
	address       func(sw uint8) *net.UDPAddr
	reserveFloor  func(floor uint64) error
	retry         time.Duration
	invalidateFor time.Duration // how long a path's INVALIDATE is retried before the write is refused
	updateTries   int

	mu        sync.Mutex
	seq       uint64
	reserved  uint64
	floorKept bool // whether a floor is kept (reserved is meaningful)
	renewing  bool
	waiters   map[waitKey]chan bool // true: acked, false: released
	stats     coherenceStats
}

func newCoherence() *coherence {
	return &coherence{retry: 50 * time.Millisecond, invalidateFor: 2500 * time.Millisecond, updateTries: 4,
		seq: uint64(clockNow().UnixMilli()), waiters: map[waitKey]chan bool{}}
}

// startFrom continues from the floor earlier lives persisted if it is ahead of the clock, and persists the
// first reservation before any number is used.
func (c *coherence) startFrom(floor *uint64) error {
	c.mu.Lock()
	if floor != nil && serialNewer(*floor, c.seq) {
		c.seq = *floor
	}
	next := c.seq + seqBlock
	c.mu.Unlock()
	if err := c.reserveFloor(next); err != nil {
		return err
	}
	c.mu.Lock()
	c.reserved, c.floorKept = next, true
	c.mu.Unlock()
	return nil
}

// nextSeq is a fresh sequence number, newer than every one this shim's earlier lives used.
func (c *coherence) nextSeq() (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nxt := c.seq + 1
	if c.floorKept {
		if !serialNewer(c.reserved, nxt) {
			return 0, errSeqExhausted
		}
		if serialNewer(nxt+seqBlock/2, c.reserved) && !c.renewing {
			c.renewing = true
			next := nxt + seqBlock
			go func() {
				err := c.reserveFloor(next)
				c.mu.Lock()
				c.renewing = false
				if err == nil && serialNewer(next, c.reserved) {
					c.reserved = next
				}
				c.mu.Unlock()
				if err != nil {
					slog.Warn("could not persist the sequence floor", "err", err)
				}
			}()
		}
	}
	c.seq = breakSeq(c, nxt)
	return c.seq, nil
}

// onAck is called for every INVALIDATE_ACK / UPDATE_ACK the shim receives.
func (c *coherence) onAck(m *wire.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.waiters[waitKey{m.Op, m.Seq, m.Target, m.Digest}]
	if ch == nil {
		c.stats.strayAcks++
		return
	}
	select {
	case ch <- true:
	default:
		c.stats.strayAcks++ // a duplicate ack
	}
}

// release ends the exchanges waiting on switches declared down (their acks never come).
func (c *coherence) release(targets switchSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, ch := range c.waiters {
		if _, ok := targets[k.target]; ok {
			select {
			case ch <- false:
			default:
			}
		}
	}
}

func (c *coherence) exchange(m *wire.Message, attempts int) exchange {
	key := waitKey{wire.ReplyOp(m.Op), m.Seq, m.Target, m.Digest}
	ch := make(chan bool, 1)
	c.mu.Lock()
	c.waiters[key] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, key)
		c.mu.Unlock()
	}()
	data, err := m.Encode()
	if err != nil {
		slog.Error("coherence message does not encode", "err", err)
		return timedOut
	}
	dest := c.address(m.Target)
	timer := time.NewTimer(c.retry)
	defer timer.Stop()
	for i := 0; i < attempts; i++ {
		// declared down before this exchange began or between two tries: release ended only the exchanges
		// waiting when the controller's push came
		if c.isDown(m.Target) {
			return released
		}
		if i > 0 {
			c.mu.Lock()
			c.stats.retransmits++
			c.mu.Unlock()
		}
		c.send(data, dest)
		timer.Reset(c.retry)
		select {
		case ok := <-ch:
			if ok {
				return acked
			}
			return released
		case <-timer.C:
		}
	}
	return timedOut
}

// shown is the key a coherence message carries: the key itself if a datagram has room for it, else none.
func shown(name []byte) []byte {
	if len(name) <= dc.MaxDatagramKey {
		return name
	}
	return nil
}

// invalidate is phase 1 on one path; tag (epoch, version) non-nil: a populate's INVALIDATE of target's
// entry, the only one that may arm a new entry.
func (c *coherence) invalidate(key digest, seq uint64, target uint8, tag *[2]uint32, name []byte) exchange {
	c.mu.Lock()
	c.stats.invalidates++
	c.mu.Unlock()
	m := &wire.Message{Op: dc.OpInvalidate, Digest: key, Seq: seq, Target: target, Key: shown(name)}
	if tag != nil {
		m.Flags = dc.FlagPopulate
		m.SpineLoad, m.LeafLoad = tag[0], tag[1]&0xFFFF
	}
	attempts := max(1, int((c.invalidateFor+c.retry/2)/c.retry))
	r := c.exchange(m, attempts)
	if r == timedOut {
		c.mu.Lock()
		c.stats.failedInvalidates++
		c.mu.Unlock()
		slog.Warn("invalidate not acknowledged", "digest", fmt.Sprintf("%x", key), "seq", seq, "switch", target)
	}
	return r
}

// update is phase 2 (also cache population) on one path; a failure only leaves copies invalid, which is safe.
func (c *coherence) update(key digest, seq uint64, value []byte, target uint8, name []byte) bool {
	if len(value) > dc.MaxCacheable {
		return false
	}
	c.mu.Lock()
	c.stats.updates++
	c.mu.Unlock()
	r := c.exchange(&wire.Message{Op: dc.OpUpdate, Key: shown(name), Digest: key, Seq: seq, Value: value,
		Target: target}, c.updateTries)
	if r != acked {
		c.mu.Lock()
		c.stats.failedUpdates++
		c.mu.Unlock()
	}
	return r == acked
}

// invalidatePaths is phase 1 along paths: the far ends that acknowledged it, or nil, false if a path timed
// out. A path whose far end was declared down meanwhile is dropped, but the storage leaf before it still
// counts: if no acknowledged path passed the leaf and it may hold a copy, the same message goes on a path
// ending at the leaf. leafHolds says (under the shim's lock) whether it may.
func (c *coherence) invalidatePaths(key digest, seq uint64, paths []uint8, tag *[2]uint32, name []byte,
	leaf uint8, leafHolds func() bool) ([]uint8, bool) {
	if len(paths) == 0 {
		slog.Error("no live switch to invalidate at; has the controller pushed the partition?",
			"digest", fmt.Sprintf("%x", key))
		return nil, false
	}
	results := make([]exchange, len(paths))
	if len(paths) == 1 {
		results[0] = c.invalidate(key, seq, paths[0], tag, name)
	} else {
		var wg sync.WaitGroup
		for i, t := range paths {
			wg.Add(1)
			go func() { defer wg.Done(); results[i] = c.invalidate(key, seq, t, tag, name) }()
		}
		wg.Wait()
	}
	var ack []uint8
	for i, r := range results {
		switch r {
		case timedOut:
			return nil, false
		case acked:
			ack = append(ack, paths[i])
		}
	}
	if len(ack) == 0 && tag == nil && leafHolds() {
		switch c.invalidate(key, seq, leaf, nil, name) {
		case acked:
			ack = []uint8{leaf}
		case timedOut:
			return nil, false
		}
	}
	return ack, true
}

// updatePaths is phase 2 along paths: whether every far end acknowledged it.
func (c *coherence) updatePaths(key digest, seq uint64, value []byte, paths []uint8, name []byte) bool {
	if len(paths) == 0 {
		return false
	}
	if len(paths) == 1 {
		return c.update(key, seq, value, paths[0], name)
	}
	oks := make([]bool, len(paths))
	var wg sync.WaitGroup
	for i, t := range paths {
		wg.Add(1)
		go func() { defer wg.Done(); oks[i] = c.update(key, seq, value, t, name) }()
	}
	wg.Wait()
	return !slices.Contains(oks, false)
}
