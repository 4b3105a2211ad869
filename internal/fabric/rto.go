package fabric

// How long a request waits for a reply before its next copy: TCP's retransmission timeout (RFC 6298) per
// storage server, reads apart from writes, as client_lib/rto.py computes it (its docstring says why).

import (
	"math"
	"time"
)

const (
	rtoAlpha = 1.0 / 8 // SRTT gain
	rtoBeta  = 1.0 / 4 // RTTVAR gain
	rtoK     = 4       // RTTVAR multiplier
	// DefaultMinTimeout is the RTO's floor: above an emulated fabric's scheduling jitter (client_lib/rto.py)
	DefaultMinTimeout = 20 * time.Millisecond
	granularity       = time.Millisecond
)

// rto is one destination's retransmission timeout. Its fields are the client's lock's.
type rto struct {
	initial, floor, cap time.Duration
	srtt, rttvar        float64 // seconds; srtt < 0: no sample yet
	backoff             int     // doublings since the last sample
	generation          uint64  // changes with every sample and back-off: which timeouts still count
}

func newRTO(initial, floor, cap time.Duration) *rto {
	return &rto{initial: initial, floor: floor, cap: cap, srtt: -1}
}

func (r *rto) base() time.Duration {
	if r.srtt < 0 {
		return r.initial
	}
	b := time.Duration((r.srtt + math.Max(granularity.Seconds(), rtoK*r.rttvar)) * float64(time.Second))
	return min(r.cap, max(r.floor, b))
}

// current is the RTO a request sent now starts with: base doubled per back-off, at most the cap.
func (r *rto) current() time.Duration {
	return min(r.cap, time.Duration(float64(r.base())*math.Pow(2, float64(r.backoff))))
}

// sample is a round trip of a request sent once (Karn's rule is the caller's).
func (r *rto) sample(rtt time.Duration) {
	s := math.Max(0, rtt.Seconds())
	if r.srtt < 0 {
		r.srtt, r.rttvar = s, s/2
	} else {
		r.rttvar = (1-rtoBeta)*r.rttvar + rtoBeta*math.Abs(r.srtt-s)
		r.srtt = (1-rtoAlpha)*r.srtt + rtoAlpha*s
	}
	r.backoff = 0
	r.generation++
}

// timedOut: a copy sent while generation was current got no reply in time; back off once per generation.
func (r *rto) timedOut(generation uint64) {
	if generation != r.generation {
		return
	}
	if float64(r.base())*math.Pow(2, float64(r.backoff)) < float64(r.cap) {
		r.backoff++
	}
	r.generation++
}

// schedule is one request's copies: copy k waits min(cap, max(rto, 2 x the previous wait)); the request gives
// up (retries+1) x cap after its first copy (client_lib/rto.py's Schedule).
type schedule struct {
	rto             *rto
	retries         int
	start, deadline time.Time
	wait            time.Duration
	sent            int // copies sent so far; the next copy's attempt number
	generation      uint64
}

// nextCopy records a copy sent at now and returns until when to wait for it; false: give up (not sent).
func (s *schedule) nextCopy(now time.Time) (time.Time, bool) {
	if s.sent == 0 {
		s.start, s.deadline = now, now.Add(time.Duration(s.retries+1)*s.rto.cap)
	} else if !now.Before(s.deadline.Add(-time.Microsecond)) || s.retries == 0 {
		return time.Time{}, false
	}
	switch {
	case s.retries == 0:
		s.wait = s.rto.cap
	case s.sent == 0:
		s.wait = s.rto.current()
	default:
		s.wait = min(s.rto.cap, max(s.rto.current(), 2*s.wait))
	}
	s.generation = s.rto.generation
	s.sent++
	until := now.Add(s.wait)
	if until.After(s.deadline) {
		until = s.deadline
	}
	return until, true
}

func (s *schedule) timedOut() { s.rto.timedOut(s.generation) }

// replied: a reply came at now; a sample only if one copy was sent (Karn's rule).
func (s *schedule) replied(now time.Time) {
	if s.sent == 1 {
		s.rto.sample(now.Sub(s.start))
	}
}
