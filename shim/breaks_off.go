//go:build !breaks

package main

// The normal build: no break of tests/breaks.py can be armed (the breaks build, tag breaks, has them).

import "flag"

var clockNow = timeNow

// breakFlags adds nothing: --breaks exists only in the breaks build, so no command line arms one here.
func breakFlags(*flag.FlagSet) {}

func armBreaks() error { return nil }

func breakPaths(_ *cacheView, ends []uint8) []uint8 { return ends }

func breakSeq(_ *coherence, next uint64) uint64 { return next }

func breakInvalidate(_ *[2]uint32, _ []uint8, real func() ([]uint8, bool)) ([]uint8, bool) {
	return real()
}
