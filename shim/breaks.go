package main

import (
	"fmt"
	"time"
)

func timeNow() time.Time { return time.Now() }

func errNoBreaks(v string) error {
	return fmt.Errorf("DC_BREAKS=%s: this build has no breaks (build/distcache-shim-breaks has, for tests)", v)
}
