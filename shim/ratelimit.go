package main

import "time"

// tokenBucket is the storage server's capacity (paper §6: rate-limited servers), as distcache/ratelimit.py's
// TokenBucket: rate tokens per second, at most burst saved up; reserve may leave a debt later callers wait out.
type tokenBucket struct {
	rate, burst, tokens, spent float64
	at                         time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), at: time.Now()}
}

func (b *tokenBucket) refill() {
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
}

// reserve the next token: how long until it is there (0: now), or false if that is past maxWait.
func (b *tokenBucket) reserve(maxWait float64) (time.Duration, bool) {
	b.refill()
	wait := max(0, (1-b.tokens)/b.rate)
	if wait > maxWait {
		return 0, false
	}
	b.tokens--
	b.spent++
	return time.Duration(wait * float64(time.Second)), true
}

// charge spends tokens for work done without asking (coherence messages).
func (b *tokenBucket) charge(tokens float64) {
	b.refill()
	b.tokens -= tokens
	b.spent += tokens
}
