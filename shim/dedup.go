package main

// Retried writes are applied once, at any rate: every write is remembered for the whole retry span (the Python
// shim's shim/dedup.py documents why; docs/protocol.md, "Each write applied once"). A write is identified by
// (client address, seq); the first copy is applied, a copy arriving while it runs is dropped, a copy arriving
// after it finished gets the same reply again. Memory is bounded by a byte budget: a new write that finds it
// full is refused BUSY, never remembered early-forgotten. The table is the shim's state (under Shim.mu).

import (
	"container/list"
	"net/netip"
	"strconv"
	"time"

	"distcache/internal/dc"
)

// the records' names and the table's accounting are distcache/records.py's (internal/dc)
const (
	entryBytes = dc.DedupEntryBytes // memory one remembered write costs (its id, its reply, the table's slot)
	replyBytes = dc.DedupReplyBytes // of a reply's bytes, what entryBytes covers; a longer one costs its excess
	markerDB   = dc.MarkerDB        // the Redis database of the shim's records: user data is 0
)

// requestID is a write's identity: the client's address (its port does not count: a client that rebinds keeps
// it) and its seq.
type requestID struct {
	ip  netip.Addr
	seq uint64
}

// dedupMarker is the Redis key (in markerDB) of a write's marker: distcache/records.py's dedup_marker.
func dedupMarker(id requestID) string {
	b := make([]byte, 0, len(dc.MarkerPrefix)+40)
	b = append(b, dc.MarkerPrefix...)
	b = id.ip.AppendTo(b)
	b = append(b, ':')
	return string(strconv.AppendUint(b, id.seq, 10))
}

// begin's answers besides a finished write's reply
type dedupState int

const (
	dedupNew     dedupState = iota // apply it (it is now pending)
	dedupPending                   // a copy of a write in progress: drop it
	dedupBusy                      // no room to remember it: refuse it BUSY
	dedupDone                      // finished: send its reply again
)

type dedupEntry struct {
	id    requestID
	at    time.Time
	reply []byte // nil: pending
}

type dedup struct {
	span     time.Duration
	memory   int64
	capacity int64
	bytes    int64
	seen     map[requestID]*list.Element
	order    *list.List // oldest first
	refused  uint64
	now      func() time.Time
}

func newDedup(memory int64, span time.Duration) *dedup {
	return &dedup{span: span, memory: memory, capacity: memory / entryBytes, seen: map[requestID]*list.Element{},
		order: list.New(), now: time.Now}
}

func extra(reply []byte) int64 {
	if len(reply) > replyBytes {
		return int64(len(reply) - replyBytes)
	}
	return 0
}

func (d *dedup) expire() {
	limit := d.now().Add(-d.span)
	for e := d.order.Front(); e != nil; e = d.order.Front() {
		ent := e.Value.(*dedupEntry)
		if !ent.at.Before(limit) {
			return
		}
		d.order.Remove(e)
		delete(d.seen, ent.id)
		d.bytes -= entryBytes + extra(ent.reply)
	}
}

// begin starts a write (dedupNew), or says what it is a copy of.
func (d *dedup) begin(id requestID) (dedupState, []byte) {
	d.expire()
	if e, ok := d.seen[id]; ok {
		if r := e.Value.(*dedupEntry).reply; r != nil {
			return dedupDone, r
		}
		return dedupPending, nil
	}
	if d.bytes+entryBytes > d.memory {
		d.refused++
		return dedupBusy, nil
	}
	d.seen[id] = d.order.PushBack(&dedupEntry{id: id, at: d.now()})
	d.bytes += entryBytes
	return dedupNew, nil
}

// peek is what begin would answer for a copy of a write it knows, without beginning one (dedupNew: unknown).
func (d *dedup) peek(id requestID) (dedupState, []byte) {
	d.expire()
	if e, ok := d.seen[id]; ok {
		if r := e.Value.(*dedupEntry).reply; r != nil {
			return dedupDone, r
		}
		return dedupPending, nil
	}
	return dedupNew, nil
}

func (d *dedup) finish(id requestID, reply []byte) {
	if e, ok := d.seen[id]; ok {
		ent := e.Value.(*dedupEntry)
		d.bytes += extra(reply) - extra(ent.reply)
		ent.reply = reply
	}
}

func (d *dedup) len() int { return len(d.seen) }
