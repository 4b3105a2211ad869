package main

import (
	"net"
	"sync"
	"testing"
	"time"

	"distcache/internal/dc"
	"distcache/internal/wire"
)

// a coherence whose sends are recorded (the test plays the switches: it acks by calling onAck)
func testCoherence(down func(uint8) bool) (*coherence, func() []*wire.Message) {
	c := newCoherence()
	c.retry = 20 * time.Millisecond
	c.invalidateFor = 200 * time.Millisecond
	var mu sync.Mutex
	var sent []*wire.Message
	c.send = func(data []byte, _ *net.UDPAddr) {
		m, err := wire.Decode(data)
		if err != nil {
			panic(err)
		}
		mu.Lock()
		sent = append(sent, m)
		mu.Unlock()
	}
	c.isDown = down
	c.address = func(uint8) *net.UDPAddr { return &net.UDPAddr{} }
	return c, func() []*wire.Message { mu.Lock(); defer mu.Unlock(); return append([]*wire.Message{}, sent...) }
}

func TestAnExchangeWithASwitchDeclaredDownBeforeItStartsIsReleasedUnsent(t *testing.T) {
	c, sent := testCoherence(func(uint8) bool { return true })
	if r := c.invalidate(digest{1}, 5, 1, nil, nil); r != released || len(sent()) != 0 {
		t.Fatalf("%v, %d sent", r, len(sent()))
	}
}

func TestASwitchDeclaredDownBetweenTwoTriesIsReleasedAtTheNext(t *testing.T) {
	var mu sync.Mutex
	down := false
	c, sent := testCoherence(func(uint8) bool { mu.Lock(); defer mu.Unlock(); return down })
	go func() {
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		down = true
		mu.Unlock()
	}()
	began := time.Now()
	if r := c.invalidate(digest{1}, 5, 1, nil, nil); r != released {
		t.Fatalf("%v", r)
	}
	if time.Since(began) > 150*time.Millisecond || len(sent()) == 0 {
		t.Fatalf("released after %v, %d sent", time.Since(began), len(sent()))
	}
}

func TestReleaseEndsTheExchangesWaitingOnTheSwitchesDeclaredDown(t *testing.T) {
	c, _ := testCoherence(func(uint8) bool { return false })
	c.invalidateFor = 5 * time.Second
	done := make(chan exchange)
	go func() { done <- c.invalidate(digest{1}, 5, 2, nil, nil) }()
	time.Sleep(30 * time.Millisecond)
	c.release(switchSet{2: {}})
	select {
	case r := <-done:
		if r != released {
			t.Fatalf("%v", r)
		}
	case <-time.After(time.Second):
		t.Fatal("not released")
	}
}

func TestALiveSwitchIsWaitedForUntilItsAckAndOnlyItsOwnAckCounts(t *testing.T) {
	c, sent := testCoherence(func(uint8) bool { return false })
	done := make(chan exchange, 1)
	key := digest{7}
	go func() { done <- c.invalidate(key, 9, 1, nil, []byte("k")) }()
	time.Sleep(50 * time.Millisecond)
	// an ack with the same seq and target but another key's digest (a previous life's, or one that came
	// round) completes nothing
	c.onAck(&wire.Message{Op: dc.OpInvalidateAck, Seq: 9, Target: 1, Digest: digest{8}})
	c.onAck(&wire.Message{Op: dc.OpInvalidateAck, Seq: 8, Target: 1, Digest: key})
	select {
	case r := <-done:
		t.Fatalf("completed by another exchange's ack: %v", r)
	case <-time.After(30 * time.Millisecond):
	}
	c.onAck(&wire.Message{Op: dc.OpInvalidateAck, Seq: 9, Target: 1, Digest: key})
	if r := <-done; r != acked {
		t.Fatalf("%v", r)
	}
	ms := sent()
	if len(ms) < 2 || ms[0].Op != dc.OpInvalidate || string(ms[0].Key) != "k" || ms[0].Seq != 9 {
		t.Fatalf("sent %+v", ms)
	}
	if c.stats.strayAcks != 2 || c.stats.retransmits == 0 {
		t.Fatalf("stats %+v", c.stats)
	}
}

func TestAPathsTimeoutFailsPhaseOneAndADeadSpinesPathFallsToTheLeaf(t *testing.T) {
	c, sent := testCoherence(func(uint8) bool { return false })
	if _, ok := c.invalidatePaths(digest{1}, 3, []uint8{1}, nil, nil, 64, func() bool { return true }); ok {
		t.Fatal("a path nobody acknowledged counted as done")
	}
	// spine 2 is released (declared down) while pending: the leaf, which may hold a copy, gets its own path
	go func() {
		time.Sleep(30 * time.Millisecond)
		c.release(switchSet{2: {}})
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			for _, m := range sent() {
				if m.Target == 64 {
					c.onAck(&wire.Message{Op: dc.OpInvalidateAck, Seq: m.Seq, Target: 64, Digest: m.Digest})
					return
				}
			}
		}
	}()
	c.invalidateFor = 2 * time.Second
	ends, ok := c.invalidatePaths(digest{2}, 4, []uint8{2}, nil, nil, 64, func() bool { return true })
	if !ok || len(ends) != 1 || ends[0] != 64 {
		t.Fatalf("%v %v", ends, ok)
	}
}
