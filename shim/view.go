package main

// What a shim knows of the caches: which switches may hold a valid copy of which key, and the controller's
// partition and down-set (kept in the state file across restarts). The invariant every write relies on, as
// the Python shim's shim/view.py states it: every switch in service that may hold a valid copy of key k is
// in cached[k] or not in known. A populate adds its switch to cached[k] before any copy can become valid;
// only the agent's evict, after the entry is gone, removes it; a shim that starts knows nothing (known is
// empty) except on the deployment's first start (fresh); the controller's view adds the switches whose
// agents it heard from. The view is the shim's state (under Shim.mu).

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"distcache/internal/cluster"
	"distcache/internal/dc"
)

type digest = [dc.DigestLen]byte

type switchSet map[uint8]struct{}

func (s switchSet) sorted() []uint8 {
	out := make([]uint8, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// errStaleView is a view collected for another incarnation of this shim.
var errStaleView = errors.New("stale view")

type cacheView struct {
	buckets       []uint32
	down          switchSet
	downKnown     bool // whether down is the controller's: until then no spine is populated
	epoch         uint64
	leafID        uint8
	spineIDs      switchSet
	cacheSwitches switchSet // the switches that may cache our keys under any mechanism
	known         switchSet // switches whose cached keys we know (every other one counts as caching every key)
	incarnation   uint64
	cached        map[digest]switchSet
}

func newCacheView(srv *cluster.Server, fresh bool) *cacheView {
	v := &cacheView{down: switchSet{}, downKnown: fresh, leafID: srv.LeafID, spineIDs: switchSet{},
		cacheSwitches: switchSet{}, known: switchSet{}, cached: map[digest]switchSet{}}
	if srv.LeafMayCache {
		v.cacheSwitches[srv.LeafID] = struct{}{}
	}
	for _, id := range srv.SpineIDs {
		v.spineIDs[id] = struct{}{}
		v.cacheSwitches[id] = struct{}{}
	}
	if fresh {
		for id := range v.cacheSwitches {
			v.known[id] = struct{}{}
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	v.incarnation = binary.BigEndian.Uint64(b[:]) >> 1 // 63 bits, never 0 in practice (0: "not checked")
	if v.incarnation == 0 {
		v.incarnation = 1
	}
	return v
}

func (v *cacheView) viewKnown() bool { return len(v.unknownSwitches()) == 0 }

// unknownSwitches are the cache switches in service whose cached keys we do not know.
func (v *cacheView) unknownSwitches() []uint8 {
	var out []uint8
	for id := range v.cacheSwitches {
		_, k := v.known[id]
		_, d := v.down[id]
		if !k && !d {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// holders are the switches in service that may hold a valid copy of the key (the invariant).
func (v *cacheView) holders(key digest) switchSet {
	out := switchSet{}
	for id := range v.cached[key] {
		out[id] = struct{}{}
	}
	for id := range v.cacheSwitches {
		if _, k := v.known[id]; !k {
			out[id] = struct{}{}
		}
	}
	for id := range v.down {
		delete(out, id)
	}
	return out
}

// anyHolder is len(holders(key)) > 0 without building the set (every request asks it).
func (v *cacheView) anyHolder(key digest) bool {
	for id := range v.cached[key] {
		if _, d := v.down[id]; !d {
			return true
		}
	}
	for id := range v.cacheSwitches {
		_, k := v.known[id]
		_, d := v.down[id]
		if !k && !d {
			return true
		}
	}
	return false
}

// paths are the far ends of a write's phase 1: every spine in service that may hold a copy; or, if none
// and the storage leaf may hold one, the leaf itself (it reflects the message).
func (v *cacheView) paths(key digest) []uint8 {
	h := v.holders(key)
	var ends []uint8
	for id := range h {
		if _, s := v.spineIDs[id]; s {
			ends = append(ends, id)
		}
	}
	slices.Sort(ends)
	if len(ends) == 0 {
		if _, l := h[v.leafID]; l {
			ends = []uint8{v.leafID}
		}
	}
	return breakPaths(v, ends)
}

func (v *cacheView) evict(key digest, sw uint8) bool {
	s := v.cached[key]
	if _, ok := s[sw]; !ok {
		return false
	}
	delete(s, sw)
	if len(s) == 0 {
		delete(v.cached, key)
	}
	return true
}

func (v *cacheView) setPartition(buckets []uint32, down []uint32, epoch uint64, haveDown bool) error {
	if len(buckets) != dc.NSpineBuckets {
		return fmt.Errorf("partition must list %d spine ids (0..255)", dc.NSpineBuckets)
	}
	for _, b := range buckets {
		if b > 255 {
			return fmt.Errorf("partition must list %d spine ids (0..255)", dc.NSpineBuckets)
		}
	}
	for _, d := range down {
		if d == 0 || d > 255 {
			return errors.New("'down' must list switch ids (1..255)")
		}
	}
	v.buckets = slices.Clone(buckets)
	if haveDown {
		v.down = switchSet{}
		for _, d := range down {
			v.down[uint8(d)] = struct{}{}
		}
		v.downKnown = true
	}
	v.epoch = epoch
	return nil
}

// addView merges the controller's view (a union, never a replacement); complete: the switches whose every
// cached key it lists, which become known. incarnation must be ours (0: not checked).
func (v *cacheView) addView(cached map[digest][]uint8, complete []uint8, incarnation uint64, server string) error {
	if incarnation != 0 && incarnation != v.incarnation {
		return fmt.Errorf("%w: view collected for shim incarnation %d, this is %d; read Stats again and resend",
			errStaleView, incarnation, v.incarnation)
	}
	for _, s := range complete {
		if _, ok := v.cacheSwitches[s]; !ok {
			return fmt.Errorf("complete: switches that cache keys of %s are %v, got %v", server,
				v.cacheSwitches.sorted(), complete)
		}
	}
	for key, sws := range cached {
		set := v.cached[key]
		if set == nil {
			set = switchSet{}
			v.cached[key] = set
		}
		for _, s := range sws {
			set[s] = struct{}{}
		}
	}
	for _, s := range complete {
		v.known[s] = struct{}{}
	}
	return nil
}

type stateFile struct {
	Buckets []uint32 `json:"buckets"`
	Down    []uint32 `json:"down"`
	Epoch   uint64   `json:"epoch"`
}

func (v *cacheView) state() stateFile {
	down := make([]uint32, 0, len(v.down))
	for _, d := range v.down.sorted() {
		down = append(down, uint32(d))
	}
	b := v.buckets
	if b == nil {
		b = make([]uint32, dc.NSpineBuckets)
	}
	return stateFile{Buckets: slices.Clone(b), Down: down, Epoch: v.epoch}
}

// saveState writes the partition, down-set and epoch durably (fsync'd, then renamed over the file).
func saveState(path string, st stateFile) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := path[:len(path)-len(filepath.Ext(path))] + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func loadState(path string) (*stateFile, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st stateFile
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	if st.Buckets == nil {
		return nil, errors.New("it lists no buckets")
	}
	return &st, nil
}
