package main

import "sync"

// keyLocks are per-key locks that exist only while someone holds or waits for them: the writes and
// populates of a key run under its lock (keys are many and most are written rarely, so memory stays bounded).
type keyLocks struct {
	mu    sync.Mutex
	locks map[[16]byte]*keyLock
}

type keyLock struct {
	mu    sync.Mutex
	users int
}

func newKeyLocks() *keyLocks { return &keyLocks{locks: map[[16]byte]*keyLock{}} }

func (k *keyLocks) get(digest [16]byte) *keyLock {
	l := k.locks[digest]
	if l == nil {
		l = &keyLock{}
		k.locks[digest] = l
	}
	l.users++
	return l
}

// lock holds digest's lock until the returned function is called.
func (k *keyLocks) lock(digest [16]byte) func() {
	k.mu.Lock()
	l := k.get(digest)
	k.mu.Unlock()
	l.mu.Lock()
	return func() { k.release(digest, l) }
}

// tryLock holds digest's lock if nobody holds it now (the batch path never waits for a key).
func (k *keyLocks) tryLock(digest [16]byte) (func(), bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.locks[digest]; l != nil {
		return nil, false
	}
	l := k.get(digest)
	l.mu.Lock()
	return func() { k.release(digest, l) }, true
}

func (k *keyLocks) release(digest [16]byte, l *keyLock) {
	l.mu.Unlock()
	k.mu.Lock()
	l.users--
	if l.users == 0 {
		delete(k.locks, digest)
	}
	k.mu.Unlock()
}
