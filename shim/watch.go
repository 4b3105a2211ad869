package main

// The watch on a shim's redis-server, and the invalidation of what an evicting Redis evicts.

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

const redisWatchInterval = 200 * time.Millisecond

// watchRedis notices a restart of the shim's redis-server (a new run_id) and resynchronizes the caches: a
// restarted Redis holds what its append-only file kept, and copies in switches may hold values it no longer
// has, so every cached key is refreshed as if written again with what Redis holds now. The resync runs beside
// the watch; a restart seen while one runs starts it again (what the newest Redis holds is what every copy
// must follow).
func (s *Shim) watchRedis() {
	var cancelResync context.CancelFunc
	tick := time.NewTicker(redisWatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			if cancelResync != nil {
				cancelResync()
			}
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		id, err := s.store.runID(ctx)
		cancel()
		s.mu.Lock()
		s.redisDown = err != nil
		if err != nil || id == s.redisRunID {
			s.mu.Unlock()
			continue
		}
		s.redisRunID = id
		s.redisRestarts++
		s.mu.Unlock()
		if cancelResync != nil {
			cancelResync()
		}
		var rctx context.Context
		rctx, cancelResync = context.WithCancel(s.ctx)
		go s.resync(rctx)
	}
}

// resync refreshes every key some switch may cache, after a restart of Redis.
func (s *Shim) resync(ctx context.Context) {
	s.mu.Lock()
	keys := make([]digest, 0, len(s.view.cached))
	for d := range s.view.cached {
		keys = append(keys, d)
	}
	unknown := s.view.unknownSwitches()
	s.mu.Unlock()
	if len(unknown) > 0 {
		slog.Warn("redis-server restarted while the cached keys of some switches are unknown: their copies are "+
			"refreshed when each key is next written", "switches", unknown)
	}
	slog.Warn("redis-server restarted: resynchronizing cached keys", "keys", len(keys))
	for _, d := range keys {
		if ctx.Err() != nil {
			return
		}
		state, err := s.refresh(ctx, d)
		if err != nil {
			// Redis went away again: its next life is a new run id, and the watch starts the resync again then
			slog.Warn("resynchronization stopped: redis unavailable", "err", err)
			return
		}
		s.count(s.resynced, state)
	}
}

func (st *store) maxmemoryPolicy(ctx context.Context) string {
	kv, err := st.data.Do(ctx, st.data.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
	if err != nil {
		return ""
	}
	return kv["maxmemory-policy"]
}

// watchEvictions: under an evicting maxmemory-policy, invalidate every copy of a cached key Redis evicts (it
// sends an "evicted" keyspace event as it evicts; the shim turns them on), as after a write of "no value".
func (s *Shim) watchEvictions() {
	st := s.store
	for s.ctx.Err() == nil {
		kv, err := st.data.Do(s.ctx, st.data.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
		if err == nil {
			events := kv["notify-keyspace-events"]
			for _, c := range "Ee" {
				if !strings.ContainsRune(events, c) {
					events += string(c)
				}
			}
			err = st.data.Do(s.ctx, st.data.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events",
				events).Build()).Error()
		}
		if err == nil {
			err = st.data.Receive(s.ctx, st.data.B().Subscribe().Channel("__keyevent@0__:evicted").Build(),
				func(msg rueidis.PubSubMessage) { s.onEvicted([]byte(msg.Message)) })
		}
		if s.ctx.Err() != nil {
			return
		}
		slog.Warn("eviction watch: redis unavailable, trying again", "err", err)
		select {
		case <-s.ctx.Done():
		case <-time.After(redisWatchInterval):
		}
	}
}

func (s *Shim) onEvicted(key []byte) {
	d := s.digest(key)
	s.mu.Lock()
	cached := s.view.anyHolder(d)
	if cached {
		s.names.learn(d, key)
	}
	s.mu.Unlock()
	if !cached {
		return
	}
	go func() {
		state, err := s.refresh(s.ctx, d)
		if err != nil {
			s.count(s.evicted, "failed")
			slog.Warn("invalidating an evicted key: redis unavailable", "err", err)
			return
		}
		s.count(s.evicted, state)
	}()
}
