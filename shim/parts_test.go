package main

import (
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"distcache/internal/cluster"
	"distcache/internal/dc"
)

func TestDedupRemembersEveryWriteForItsSpanAndRefusesPastItsMemory(t *testing.T) {
	d := newDedup(3*entryBytes, time.Second)
	now := time.Unix(1000, 0)
	d.now = func() time.Time { return now }
	ip := netip.MustParseAddr
	a, b, c, e := requestID{ip("10.0.0.1"), 1}, requestID{ip("10.0.0.1"), 2}, requestID{ip("10.0.0.2"), 1},
		requestID{ip("10.0.0.9"), 9}
	if dedupMarker(a) != "dc:applied:10.0.0.1:1" {
		t.Fatalf("marker %q", dedupMarker(a))
	}
	for _, id := range []requestID{a, b, c} {
		if st, _ := d.begin(id); st != dedupNew {
			t.Fatalf("%v: %v", id, st)
		}
	}
	if st, _ := d.begin(a); st != dedupPending {
		t.Fatalf("a copy of a running write: %v", st)
	}
	d.finish(a, []byte("reply"))
	if st, r := d.begin(a); st != dedupDone || string(r) != "reply" {
		t.Fatalf("a copy of a finished write: %v %q", st, r)
	}
	if st, _ := d.begin(e); st != dedupBusy || d.refused != 1 {
		t.Fatalf("past the memory: %v", st)
	}
	if st, _ := d.peek(e); st != dedupNew {
		t.Fatalf("peek of an unknown write: %v", st)
	}
	for _, id := range []requestID{a, b, c} { // nothing was dropped to make room
		if st, _ := d.begin(id); st == dedupNew || st == dedupBusy {
			t.Fatalf("%v forgotten within its span: %v", id, st)
		}
	}
	now = now.Add(1500 * time.Millisecond) // the span is over: every entry goes, none before
	if st, _ := d.begin(e); st != dedupNew || d.len() != 1 || d.bytes != entryBytes {
		t.Fatalf("after the span: %v, %d entries, %d bytes", st, d.len(), d.bytes)
	}
	long := make([]byte, replyBytes+100) // a long reply costs its bytes past replyBytes
	d.finish(e, long)
	if d.bytes != entryBytes+100 {
		t.Fatalf("bytes %d", d.bytes)
	}
}

func TestKeyLocksSerializeOneKeyAndVanishWhenUnused(t *testing.T) {
	k := newKeyLocks()
	var d1, d2 digest
	d2[0] = 1
	unlock := k.lock(d1)
	if _, ok := k.tryLock(d1); ok {
		t.Fatal("a held key's lock was taken again")
	}
	other, ok := k.tryLock(d2)
	if !ok {
		t.Fatal("another key's lock was not free")
	}
	other()
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u := k.lock(d1)
			n := inside.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			u()
		}()
	}
	time.Sleep(5 * time.Millisecond)
	unlock()
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d writers of one key at once", most.Load())
	}
	if len(k.locks) != 0 {
		t.Fatalf("%d locks left", len(k.locks))
	}
}

func testServer() *cluster.Server {
	return &cluster.Server{Name: "r0s0", IP: "10.1.0.1", LeafID: 64, SpineIDs: []uint8{1, 2}, LeafMayCache: true}
}

func TestTheViewCountsEveryUnknownSwitchAsHoldingEveryKey(t *testing.T) {
	v := newCacheView(testServer(), false)
	var k digest
	if !v.anyHolder(k) || len(v.holders(k)) != 3 || v.viewKnown() {
		t.Fatalf("a restarted shim's view: %v", v.holders(k))
	}
	if got := v.paths(k); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("paths %v", got)
	}
	if err := v.addView(map[digest][]uint8{k: {64}}, []uint8{1, 2, 64}, v.incarnation, "r0s0"); err != nil {
		t.Fatal(err)
	}
	if got := v.paths(k); len(got) != 1 || got[0] != 64 { // only the leaf holds it: the path ends there
		t.Fatalf("paths %v", got)
	}
	if err := v.addView(nil, nil, v.incarnation+1, "r0s0"); !errors.Is(err, errStaleView) {
		t.Fatalf("a view of another incarnation: %v", err)
	}
	if err := v.addView(nil, []uint8{9}, 0, "r0s0"); err == nil {
		t.Fatal("a switch that caches nothing of ours was taken as complete")
	}
	buckets := make([]uint32, dc.NSpineBuckets)
	if err := v.setPartition(buckets, []uint32{64}, 3, true); err != nil {
		t.Fatal(err)
	}
	if v.anyHolder(k) || len(v.paths(k)) != 0 || v.epoch != 3 {
		t.Fatalf("the leaf is down: holders %v", v.holders(k))
	}
	if err := v.setPartition(buckets[:5], nil, 0, true); err == nil {
		t.Fatal("a short partition was taken")
	}
	if !v.evict(k, 64) || v.evict(k, 64) || len(v.cached) != 0 {
		t.Fatal("evict")
	}
}

func TestTheStateFileIsWrittenWholeAndReadBack(t *testing.T) {
	path := t.TempDir() + "/shim.state.json"
	if st, err := loadState(path); st != nil || err != nil {
		t.Fatalf("no file: %v %v", st, err)
	}
	v := newCacheView(testServer(), true)
	buckets := make([]uint32, dc.NSpineBuckets)
	buckets[7] = 2
	if err := v.setPartition(buckets, []uint32{1}, 9, true); err != nil {
		t.Fatal(err)
	}
	if err := saveState(path, v.state()); err != nil {
		t.Fatal(err)
	}
	st, err := loadState(path)
	if err != nil || st.Epoch != 9 || st.Buckets[7] != 2 || len(st.Down) != 1 || st.Down[0] != 1 {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestSequenceNumbersStayBelowTheReservedFloorAndRenewIt(t *testing.T) {
	c := newCoherence()
	var mu sync.Mutex
	var floors []uint64
	c.reserveFloor = func(n uint64) error { mu.Lock(); floors = append(floors, n); mu.Unlock(); return nil }
	earlier := c.seq + 5*seqBlock // an earlier life ran ahead of the clock
	if err := c.startFrom(&earlier); err != nil {
		t.Fatal(err)
	}
	first, err := c.nextSeq()
	if err != nil || first != earlier+1 || floors[0] != earlier+seqBlock {
		t.Fatalf("first %d, floors %v (%v)", first, floors, err)
	}
	c.mu.Lock()
	c.seq = c.reserved - 1 // every reserved number used, the renewal not landed
	c.renewing = true
	c.mu.Unlock()
	if _, err := c.nextSeq(); !errors.Is(err, errSeqExhausted) {
		t.Fatalf("past the floor: %v", err)
	}
	if !serialNewer(1, 1<<64-1) || serialNewer(5, 5) || serialNewer(0, 1<<63) {
		t.Fatal("serial arithmetic")
	}
}

func TestSizesAndURLsReadAsThePythonShimReadsThem(t *testing.T) {
	for text, want := range map[string]int64{"65536": 65536, "64mb": 64 << 20, "500k": 500000, "1GB": 1 << 30} {
		if got, err := parseSize(text); err != nil || got != want {
			t.Errorf("%s: %d %v", text, got, err)
		}
	}
	if _, err := parseSize("lots"); err == nil {
		t.Error("a size that is none")
	}
	if n, a, err := redisTarget("unix:///run/r.sock"); err != nil || n != "unix" || a != "/run/r.sock" {
		t.Errorf("unix: %s %s %v", n, a, err)
	}
	if _, a, err := redisTarget("redis://10.1.0.1"); err != nil || a != "10.1.0.1:6379" {
		t.Errorf("tcp: %s %v", a, err)
	}
	for _, bad := range []string{"redis://h:1/3", "unix:///s?db=2", "http://x"} {
		if _, _, err := redisTarget(bad); err == nil {
			t.Errorf("%s was taken", bad)
		}
	}
}

func TestTheRateLimitQueuesUpToItsWaitAndDropsBeyond(t *testing.T) {
	b := newTokenBucket(10, 2)
	for i := 0; i < 2; i++ {
		if w, ok := b.reserve(0); !ok || w != 0 {
			t.Fatalf("the burst: %v %v", w, ok)
		}
	}
	if w, ok := b.reserve(0.5); !ok || w < 90*time.Millisecond || w > 110*time.Millisecond {
		t.Fatalf("the next token: %v %v", w, ok)
	}
	if _, ok := b.reserve(0.05); ok {
		t.Fatal("a wait past the queue was taken")
	}
}

func TestTheKeysLearnedFromRequestsAreBoundedByBytesTheOldestForgottenFirst(t *testing.T) {
	n := newKeyNames()
	key := make([]byte, 1000)
	for i := 0; i < recentBytes/1000+100; i++ {
		var d digest
		d[0], d[1] = byte(i), byte(i>>8)
		n.learn(d, key)
	}
	if n.bytes > recentBytes || n.recent(digest{0, 0}) != nil || n.recent(digest{byte(16000 % 256), byte(16000 >> 8)}) == nil {
		t.Fatalf("%d bytes, %d keys", n.bytes, len(n.seen))
	}
}

func TestARefusalIsOneRESPErrorWhateverTheCommandNamed(t *testing.T) {
	got := string(refusalReply("unknown command 'a\r\n+OK'"))
	if got != "-ERR unknown command 'a  +OK'\r\n" {
		t.Fatalf("%q", got)
	}
}

// TestProcsOnePerBatchWorker: the shim runs on one processor per batch worker unless --procs or $GOMAXPROCS
// says otherwise; a --procs out of range is a usage error.
func TestProcsOnePerBatchWorker(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	base := []string{"--cluster", "c.json", "--server", "r0s0", "--redis-url", "unix:///r.sock", "--control", "unix:/c"}
	t.Setenv("GOMAXPROCS", "")
	for _, tc := range []struct {
		args []string
		want int
	}{{nil, 1}, {[]string{"--batch-workers", "3"}, 3}, {[]string{"--procs", "2"}, 2}} {
		o, err := parseOptions(append(slices.Clone(base), tc.args...))
		if err != nil {
			t.Fatal(err)
		}
		runtime.GOMAXPROCS(7)
		setProcs(o)
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("%v: GOMAXPROCS %d, want %d", tc.args, got, tc.want)
		}
	}
	t.Setenv("GOMAXPROCS", "5")
	o, _ := parseOptions(base)
	runtime.GOMAXPROCS(5)
	setProcs(o)
	if got := runtime.GOMAXPROCS(0); got != 5 {
		t.Errorf("$GOMAXPROCS=5: %d", got)
	}
	var ue usageError
	if _, err := parseOptions(append(slices.Clone(base), "--procs", "-1")); !errors.As(err, &ue) {
		t.Errorf("--procs -1: %v", err)
	}
}
