package main

// Which key a digest stands for, what a shim needs to fill or refresh a cache entry (the Python shim's
// shim/names.py says why). Learned from every request (each carries both, checked to agree), the oldest
// forgotten first past recentBytes; the pairs of populated keys are also kept in Redis (markerDB), so a
// restarted shim can still refresh every copy. The recent table is the shim's state (under Shim.mu).

import (
	"container/list"
	"context"

	"github.com/redis/rueidis"

	"distcache/internal/dc"
)

const (
	namesKey    = dc.NamesKey // the hash (in markerDB) of digest -> key for every key a populate filled
	recentBytes = 16 << 20
)

type nameEntry struct {
	digest digest
	key    []byte
}

type keyNames struct {
	seen  map[digest]*list.Element
	order *list.List
	bytes int
}

func newKeyNames() *keyNames { return &keyNames{seen: map[digest]*list.Element{}, order: list.New()} }

func (n *keyNames) learn(d digest, key []byte) {
	if _, ok := n.seen[d]; ok {
		return
	}
	key = append([]byte(nil), key...) // its own bytes: a stream frame's key is a slice of the whole frame
	n.seen[d] = n.order.PushBack(&nameEntry{d, key})
	n.bytes += len(d) + len(key)
	for n.bytes > recentBytes {
		e := n.order.Front()
		ent := e.Value.(*nameEntry)
		n.order.Remove(e)
		delete(n.seen, ent.digest)
		n.bytes -= len(ent.digest) + len(ent.key)
	}
}

func (n *keyNames) recent(d digest) []byte {
	if e, ok := n.seen[d]; ok {
		return e.Value.(*nameEntry).key
	}
	return nil
}

// lookupName is the key of d from the requests seen or the populates recorded (nil: neither has it).
func (s *Shim) lookupName(ctx context.Context, d digest) ([]byte, error) {
	s.mu.Lock()
	key := s.names.recent(d)
	s.mu.Unlock()
	if key != nil {
		return key, nil
	}
	v, err := s.store.markers.Do(ctx, s.store.markers.B().Hget().Key(namesKey).Field(string(d[:])).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	return v, err
}

// recordName keeps the pair of a key about to be cached where a later life of the shim finds it.
func (s *Shim) recordName(ctx context.Context, d digest, key []byte) error {
	s.mu.Lock()
	s.names.learn(d, key)
	s.mu.Unlock()
	m := s.store.markers
	return m.Do(ctx, m.B().Hset().Key(namesKey).FieldValue().FieldValue(string(d[:]), string(key)).Build()).Error()
}

// forgetName: no switch caches the key any more, its recorded pair goes (the hash holds cached keys only).
func (s *Shim) forgetName(ctx context.Context, d digest) error {
	m := s.store.markers
	return m.Do(ctx, m.B().Hdel().Key(namesKey).Field(string(d[:])).Build()).Error()
}
