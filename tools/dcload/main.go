// Command dcload is a compiled load generator for the DistCache shim benchmark (bench/shim.py).
//
// A Python load generator spends about as much CPU per request as the shim it
// measures, so on a small machine it, not the shim, sets the figure. dcload
// knows nothing of the wire format beyond what it is told: it sends request
// datagrams that the Python side encoded (distcache/wire.py stays the one
// definition), writing a fresh 32-bit big-endian sequence number at
// -seq-offset into each copy, and counts a request answered when a datagram
// with that sequence number at that offset comes back.
//
// Usage:
//
//	dcload -target 127.0.0.1:8888 -requests reqs.hex -seq-offset 4 -concurrency 16 -duration 5s
//
// reqs.hex holds one hex-encoded request per line; workers cycle through them.
// It prints one JSON object: ops (answered within the measured window),
// seconds, timeouts, p50_us, p99_us.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	target := flag.String("target", "127.0.0.1:8888", "shim address")
	reqFile := flag.String("requests", "", "file of hex-encoded request datagrams, one per line")
	seqOff := flag.Int("seq-offset", 4, "byte offset of the 32-bit big-endian sequence number")
	conc := flag.Int("concurrency", 16, "requests in flight (one worker and socket each)")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	warmup := flag.Duration("warmup", 500*time.Millisecond, "load before the window opens")
	timeout := flag.Duration("timeout", 200*time.Millisecond, "per-request timeout (then the next request)")
	flag.Parse()
	reqs, err := readRequests(*reqFile)
	if err != nil || len(reqs) == 0 {
		fmt.Fprintf(os.Stderr, "dcload: need -requests with at least one hex request: %v\n", err)
		os.Exit(2)
	}
	for _, r := range reqs {
		if len(r) < *seqOff+4 {
			fmt.Fprintln(os.Stderr, "dcload: a request is shorter than seq-offset + 4")
			os.Exit(2)
		}
	}
	addr, err := net.ResolveUDPAddr("udp", *target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dcload: %v\n", err)
		os.Exit(2)
	}
	begin := time.Now().Add(*warmup)
	end := begin.Add(*duration)
	var mu sync.Mutex
	var lat []float64
	timeouts := 0
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn, err := net.DialUDP("udp", nil, addr)
			if err != nil {
				fmt.Fprintf(os.Stderr, "dcload: %v\n", err)
				return
			}
			defer conn.Close()
			buf, in := make([]byte, 2048), make([]byte, 65536)
			var mine []float64
			lost := 0
			for n := 0; ; n++ {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				req := reqs[(w*7919+n)%len(reqs)]
				out := buf[:len(req)]
				copy(out, req)
				seq := uint32(w)<<22 | uint32(n)&0x3FFFFF
				binary.BigEndian.PutUint32(out[*seqOff:], seq)
				if _, err := conn.Write(out); err != nil {
					continue
				}
				_ = conn.SetReadDeadline(t0.Add(*timeout))
				for {
					k, err := conn.Read(in)
					if err != nil {
						if t0.After(begin) {
							lost++
						}
						break
					}
					if k >= *seqOff+4 && binary.BigEndian.Uint32(in[*seqOff:]) == seq {
						t1 := time.Now()
						if t0.After(begin) && t1.Before(end) {
							mine = append(mine, float64(t1.Sub(t0).Microseconds()))
						}
						break
					}
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			timeouts += lost
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	sort.Float64s(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(q*float64(len(lat)-1))]
	}
	out, _ := json.Marshal(map[string]any{"ops": len(lat), "seconds": duration.Seconds(), "timeouts": timeouts,
		"p50_us": pct(0.5), "p99_us": pct(0.99)})
	fmt.Println(string(out))
}

func readRequests(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, b)
	}
	return reqs, sc.Err()
}
