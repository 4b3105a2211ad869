package main

import "time"

// timeNow is the wall clock the coherence numbers start from (the breaks build's clock-back moves it).
func timeNow() time.Time { return time.Now() }
