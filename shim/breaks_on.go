//go:build breaks

package main

// The breaks build (tag breaks): the deliberate breaks of the coherence guarantees that tests/breaks.py
// describes, armed by --breaks name[,name...] (a flag only this build has), so the tests and the fault matrix's
// control run can show the checks catch each. Each changes the real code at one place. No normal build
// contains any of this.

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

const ackEarly = 50 * time.Millisecond

var (
	breaksArg string
	armed     = map[string]bool{}
	clockNow  = timeNow
	firstSeq  sync.Map
)

var known = []string{"ack-before-invalidate", "skip-one-invalidate", "reuse-seq", "clock-back"}

func breakFlags(fs *flag.FlagSet) {
	fs.StringVar(&breaksArg, "breaks", "", "tests only: arm these breaks of tests/breaks.py ("+
		strings.Join(known, ", ")+")")
}

func armBreaks() error {
	if breaksArg == "" {
		return nil
	}
	for _, name := range strings.Split(breaksArg, ",") {
		ok := false
		for _, k := range known {
			ok = ok || k == name
		}
		if !ok {
			return fmt.Errorf("--breaks: unknown break %q; choose from %s", name, strings.Join(known, ", "))
		}
		armed[name] = true
		fmt.Fprintf(os.Stderr, "breaks: %s armed in shim\n", name)
	}
	if armed["clock-back"] { // a condition, not a break: the wall clock reads an hour early
		clockNow = func() time.Time { return time.Now().Add(-time.Hour) }
	}
	return nil
}

// skip-one-invalidate: no write invalidates the lowest-numbered spine (a path that ended there ends at the leaf).
func breakPaths(v *cacheView, ends []uint8) []uint8 {
	if !armed["skip-one-invalidate"] {
		return ends
	}
	lowest := uint8(255)
	for id := range v.spineIDs {
		lowest = min(lowest, id)
	}
	var kept []uint8
	for _, e := range ends {
		if e != lowest {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 && len(ends) > 0 {
		return []uint8{v.leafID}
	}
	return kept
}

// reuse-seq: every coherence message carries the same sequence number.
func breakSeq(c *coherence, next uint64) uint64 {
	if !armed["reuse-seq"] {
		return next
	}
	first, _ := firstSeq.LoadOrStore(c, next)
	return first.(uint64)
}

// ack-before-invalidate: phase 1 is sent 50 ms after it is reported done.
func breakInvalidate(tag *[2]uint32, paths []uint8, real func() ([]uint8, bool)) ([]uint8, bool) {
	if !armed["ack-before-invalidate"] || tag != nil || len(paths) == 0 {
		return real()
	}
	go func() {
		time.Sleep(ackEarly)
		real()
	}()
	slog.Debug("breaks: invalidate reported done before it was sent")
	return append([]uint8{}, paths...), true
}
