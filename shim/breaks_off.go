//go:build !breaks

package main

// The normal build: no break of tests/breaks.py can be armed (the breaks build, tag breaks, has them).

import "os"

var clockNow = timeNow

// armBreaks refuses DC_BREAKS in a normal build: it names breaks only the breaks build has.
func armBreaks() error {
	if v := os.Getenv("DC_BREAKS"); v != "" {
		return errNoBreaks(v)
	}
	return nil
}

func breakPaths(_ *cacheView, ends []uint8) []uint8 { return ends }

func breakSeq(_ *coherence, next uint64) uint64 { return next }

func breakInvalidate(_ *[2]uint32, _ []uint8, real func() ([]uint8, bool)) ([]uint8, bool) {
	return real()
}
