package main

// The shim's control API (distcache/proto/shim.proto) and what it does: the controller's partition, down-set
// and view; the agents' Populate and Evict. Bad arguments get INVALID_ARGUMENT with a message that says what
// was expected; the shim keeps serving.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"distcache/internal/dc"
	"distcache/internal/pb/shimpb"
)

// populate fills a freshly inserted (invalid) cache entry of sw for the key of d, tagged (cache_epoch,
// version), with the current value: an INVALIDATE that carries the tag (only it may arm the new entry),
// addressed to sw itself, then the UPDATE of the same seq. A switch declared down is refused ("down"), as is
// every spine until the controller's down-set is known.
func (s *Shim) populate(ctx context.Context, d digest, sw uint8, tag [2]uint32, name []byte) (string, error) {
	s.mu.Lock()
	v := s.view
	_, down := v.down[sw]
	if down || (sw != v.leafID && !v.downKnown) {
		s.mu.Unlock()
		return dc.FillDown, nil
	}
	if _, ok := v.cacheSwitches[sw]; !ok {
		s.mu.Unlock()
		return "", argError{fmt.Sprintf("switch %d cannot cache keys of %s (its spines and storage leaf: %v)", sw,
			s.server.Name, v.cacheSwitches.sorted())}
	}
	s.mu.Unlock()
	if len(name) > 0 && s.digest(name) != d {
		return "", argError{fmt.Sprintf("name: %q is not the key of digest %x", name, d)}
	}
	key := name
	if len(key) == 0 {
		var err error
		if key, err = s.lookupName(ctx, d); err != nil {
			return "", err
		}
		if key == nil {
			return dc.FillNoKey, nil
		}
	}
	if err := s.recordName(ctx, d, key); err != nil { // before the entry can hold a copy: a refresh must find it
		return "", err
	}
	s.mu.Lock()
	set := s.view.cached[d]
	if set == nil {
		set = switchSet{}
		s.view.cached[d] = set
	}
	set[sw] = struct{}{}
	s.mu.Unlock()
	unlock := s.locks.lock(d)
	defer unlock()
	value, found, expires, wrongType, err := s.store.valueOf(ctx, key)
	if err != nil {
		return "", err
	}
	seq, err := s.coh.nextSeq()
	if err != nil {
		return "", err
	}
	paths, ok := s.invalidate(d, seq, []uint8{sw}, &tag, key)
	if ok && len(paths) == 0 {
		return dc.FillDown, nil
	}
	return s.fill(d, seq, value, found, expires, wrongType, paths, ok, key), nil
}

// fill is phase 2 of a populate or refresh whose phase 1 took paths (ok false: it failed), and its outcome.
// A key with a time to live is never cached (Redis expires lazily and notifies late: docs/protocol.md).
func (s *Shim) fill(d digest, seq uint64, value []byte, found, expires, wrongType bool, paths []uint8, ok bool,
	name []byte) string {
	switch {
	case !ok:
		return dc.FillFailed
	case wrongType:
		return dc.FillWrongType
	case !found:
		return dc.FillAbsent
	case expires:
		return dc.FillExpires
	case len(value) > dc.MaxCacheable:
		return dc.FillTooLarge
	case s.coh.updatePaths(d, seq, value, paths, name):
		return dc.FillValid
	}
	return dc.FillFailed
}

// refresh invalidates every copy of the key of d and fills it again with Redis's value, as a write of it
// would; a key whose name is not known is only invalidated (no_key), which is always safe.
func (s *Shim) refresh(ctx context.Context, d digest) (string, error) {
	unlock := s.locks.lock(d)
	defer unlock()
	s.mu.Lock()
	cached := s.view.anyHolder(d)
	paths := s.view.paths(d)
	s.mu.Unlock()
	if !cached {
		return dc.FillUncached, nil
	}
	key, err := s.lookupName(ctx, d)
	if err != nil {
		return "", err
	}
	var value []byte
	var found, expires, wrongType bool
	if key != nil {
		if value, found, expires, wrongType, err = s.store.valueOf(ctx, key); err != nil {
			return "", err
		}
	}
	seq, err := s.coh.nextSeq()
	if err != nil {
		return "", err
	}
	live, ok := s.invalidate(d, seq, paths, nil, key)
	if key == nil {
		return dc.FillNoKey, nil
	}
	return s.fill(d, seq, value, found, expires, wrongType, live, ok, key), nil
}

func (s *Shim) evict(ctx context.Context, d digest, sw uint8) (bool, error) {
	s.mu.Lock()
	evicted := s.view.evict(d, sw)
	_, still := s.view.cached[d]
	s.mu.Unlock()
	if !still {
		if err := s.forgetName(ctx, d); err != nil {
			return evicted, err
		}
	}
	return evicted, nil
}

// setPartition adopts the controller's partition and down-set, answered once the state file holds it.
// Requests served meanwhile already use the new partition, but the controller takes no step that relies
// on it before this answers; a shim that crashes first restarts from its older file and is pushed it again.
func (s *Shim) setPartition(buckets, down []uint32, epoch uint64) error {
	s.mu.Lock()
	if err := s.view.setPartition(buckets, down, epoch, true); err != nil {
		s.mu.Unlock()
		return err
	}
	released := switchSet{}
	for id := range s.view.down {
		released[id] = struct{}{}
	}
	st := s.view.state()
	s.mu.Unlock()
	s.coh.release(released)
	if s.opts.StateFile == "" {
		return nil
	}
	s.saving.Lock()
	defer s.saving.Unlock()
	if err := saveState(s.opts.StateFile, st); err != nil {
		return fmt.Errorf("saving the state file: %v", err)
	}
	return nil
}

// loadState: a state file means this shim was configured before (it restarted, and switches may hold copies
// of its keys it no longer knows about); an unreadable one is ignored with a warning, as the Python shim does.
func (s *Shim) loadState() error {
	if s.opts.StateFile == "" {
		return nil
	}
	st, err := loadState(s.opts.StateFile)
	if err == nil && st != nil {
		s.mu.Lock()
		err = s.view.setPartition(st.Buckets, st.Down, st.Epoch, true)
		s.mu.Unlock()
	}
	if err != nil {
		slog.Warn("ignoring unreadable state file", "file", s.opts.StateFile, "err", err)
	}
	return nil
}

// -- the gRPC service ---------------------------------------------------------------------------------

type controlService struct {
	shimpb.UnimplementedShimServer
	s *Shim
}

func serveControl(s *Shim, address string) (*grpc.Server, error) {
	lis, err := controlListener(address, false)
	if err != nil {
		return nil, fmt.Errorf("control channel %s: %v", address, err)
	}
	srv := grpc.NewServer()
	shimpb.RegisterShimServer(srv, &controlService{s: s})
	go func() { _ = srv.Serve(lis) }()
	return srv, nil
}

// argError is a control call's argument the shim cannot act on (INVALID_ARGUMENT, with what was expected).
type argError struct{ msg string }

func (e argError) Error() string { return e.msg }

func invalid(msg string) error { return status.Error(codes.InvalidArgument, msg) }

func digestArg(key []byte) (digest, error) {
	var d digest
	if len(key) != dc.DigestLen {
		return d, invalid(fmt.Sprintf("'key' must be a %d-byte key digest (Cluster.digest), got %d bytes",
			dc.DigestLen, len(key)))
	}
	copy(d[:], key)
	return d, nil
}

func switchArg(sw uint32) (uint8, error) {
	if sw == 0 || sw > 255 {
		return 0, invalid(fmt.Sprintf("'switch' must be a switch id (1..255), got %d", sw))
	}
	return uint8(sw), nil
}

// internal is an error of the shim's own (Redis unreachable): UNAVAILABLE, the caller retries.
func internal(err error) error {
	if isRedisUnavailable(err) {
		return status.Error(codes.Unavailable, "redis unavailable: "+err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (c *controlService) Ping(context.Context, *shimpb.Empty) (*shimpb.Empty, error) {
	return &shimpb.Empty{}, nil
}

func (c *controlService) Stats(context.Context, *shimpb.Empty) (*shimpb.ShimStats, error) {
	return c.s.stats(), nil
}

func (c *controlService) Metrics(context.Context, *shimpb.Empty) (*shimpb.MetricsText, error) {
	text, err := c.s.exposition()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &shimpb.MetricsText{Text: text}, nil
}

func (c *controlService) SetPartition(_ context.Context, r *shimpb.PartitionRequest) (*shimpb.Empty, error) {
	if err := c.s.setPartition(r.Buckets, r.Down, r.Epoch); err != nil {
		return nil, invalid(err.Error())
	}
	return &shimpb.Empty{}, nil
}

func (c *controlService) AddView(_ context.Context, r *shimpb.ViewRequest) (*shimpb.Empty, error) {
	cached := map[digest][]uint8{}
	for _, e := range r.Cached {
		d, err := digestArg(e.Key)
		if err != nil {
			return nil, err
		}
		for _, sw := range e.Switches {
			id, err := switchArg(sw)
			if err != nil {
				return nil, err
			}
			cached[d] = append(cached[d], id)
		}
		if _, ok := cached[d]; !ok {
			cached[d] = nil
		}
	}
	var complete []uint8
	for _, sw := range r.Complete {
		id, err := switchArg(sw)
		if err != nil {
			return nil, err
		}
		complete = append(complete, id)
	}
	c.s.mu.Lock()
	err := c.s.view.addView(cached, complete, r.Incarnation, c.s.server.Name)
	c.s.mu.Unlock()
	if errors.Is(err, errStaleView) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, invalid(err.Error())
	}
	return &shimpb.Empty{}, nil
}

func (c *controlService) Populate(ctx context.Context, r *shimpb.SwitchKey) (*shimpb.PopulateReply, error) {
	d, err := digestArg(r.Key)
	if err != nil {
		return nil, err
	}
	sw, err := switchArg(r.Switch)
	if err != nil {
		return nil, err
	}
	if r.Version == 0 || r.Version > 0xFFFF {
		return nil, invalid("version: the entry's version, 1..65535 (with cache_epoch, its tag)")
	}
	state, err := c.s.populate(ctx, d, sw, [2]uint32{r.CacheEpoch, r.Version}, r.Name)
	var bad argError
	if errors.As(err, &bad) {
		return nil, invalid(bad.msg)
	}
	if err != nil {
		return nil, internal(err)
	}
	return &shimpb.PopulateReply{State: state}, nil
}

func (c *controlService) Evict(ctx context.Context, r *shimpb.SwitchKey) (*shimpb.EvictReply, error) {
	d, err := digestArg(r.Key)
	if err != nil {
		return nil, err
	}
	sw, err := switchArg(r.Switch)
	if err != nil {
		return nil, err
	}
	evicted, err := c.s.evict(ctx, d, sw)
	if err != nil {
		return nil, internal(err)
	}
	return &shimpb.EvictReply{Evicted: evicted}, nil
}

// stats are the shim's counters and state as Stats answers them (the Python shim's stats_of).
func (s *Shim) stats() *shimpb.ShimStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.view
	s.coh.mu.Lock()
	c := s.coh.stats
	s.coh.mu.Unlock()
	u32 := func(ids []uint8) []uint32 {
		out := make([]uint32, len(ids))
		for i, id := range ids {
			out[i] = uint32(id)
		}
		return out
	}
	rate := 0.0
	if s.limiter != nil {
		rate = float64(int64(s.limiter.spent*10+0.5)) / 10
	}
	used, limit, conns := s.stream.usage()
	return &shimpb.ShimStats{
		Server: s.server.Name, Requests: clone(s.requests), Malformed: clone(s.malformed),
		Refused: clone(s.refused), Errors: clone(s.errors), Duplicates: clone(s.duplicates),
		Dedup: &shimpb.DedupStats{Entries: uint64(s.dedup.len()), Capacity: uint64(s.dedup.capacity),
			Span: s.dedup.span.Seconds()},
		RedisRestarts: s.redisRestarts, RateSpent: rate, RedisDown: s.redisDown, Resynced: clone(s.resynced),
		Evicted:    clone(s.evicted),
		Stream:     &shimpb.StreamStats{Bytes: uint64(max(0, used)), Budget: uint64(limit), Connections: uint64(conns)},
		CachedKeys: uint64(len(v.cached)), ViewKnown: v.viewKnown(), UnknownSwitches: u32(v.unknownSwitches()),
		Incarnation: v.incarnation, Epoch: v.epoch, Down: u32(v.down.sorted()),
		Coherence: &shimpb.CoherenceStats{Invalidates: c.invalidates, Updates: c.updates,
			Retransmits: c.retransmits, FailedInvalidates: c.failedInvalidates, FailedUpdates: c.failedUpdates,
			StrayAcks: c.strayAcks},
	}
}

func clone(c counter) map[string]uint64 {
	out := make(map[string]uint64, len(c))
	for k, v := range c {
		out[k] = v
	}
	return out
}
