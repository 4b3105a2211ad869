package main

// The shim's Prometheus series (client_golang), rendered in the text format for the control API's Metrics
// call: a shim lives in its storage host's namespace and reaches the control plane only over its control
// socket, so the controller's exporter serves them with the switches' (the names are the Python shim's,
// series for series). No label carries a key or anything else a client chose.

import (
	"bytes"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"distcache/internal/dc"
)

// kinds every shim exports from the start, zeros included (a series that appears late loses its first rise)
var (
	errorKinds     = []string{"overload", "rate_limited", "redis_unavailable", "invalidate_timeout", "busy", "stream_busy"}
	duplicateKinds = []string{"replayed", "in_progress", "replayed_after_restart"}
	// seconds: a request served from Redis takes 0.1-2 ms; coherence and the rate limiter's queue up to 1 s
	latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5}
)

type histogram struct {
	counts []uint64 // per bucket (not cumulative); the last: above the largest bound
	sum    float64
	n      uint64
}

func newHistogram() *histogram { return &histogram{counts: make([]uint64, len(latencyBuckets)+1)} }

func (h *histogram) observe(seconds float64) {
	h.counts[sort.SearchFloat64s(latencyBuckets, seconds)]++
	h.sum += seconds
	h.n++
}

func (h *histogram) cumulative() map[float64]uint64 {
	out, running := map[float64]uint64{}, uint64(0)
	for i, b := range latencyBuckets {
		running += h.counts[i]
		out[b] = running
	}
	return out
}

type byLabel map[string]*histogram

func (b byLabel) observe(label string, seconds float64) {
	h := b[label]
	if h == nil {
		h = newHistogram()
		b[label] = h
	}
	h.observe(seconds)
}

type replyKey struct {
	op     dc.Op
	status dc.Status
}

// metrics are what the shim records besides its counters (under Shim.mu).
type metrics struct {
	replies  map[replyKey]uint64
	requests byLabel // op -> received until answered
	queue    *histogram
	phases   byLabel // invalidate (a write's phase 1), update (phase 2)
}

func newMetrics() *metrics {
	return &metrics{replies: map[replyKey]uint64{}, requests: byLabel{}, queue: newHistogram(), phases: byLabel{}}
}

func (m *metrics) replied(op dc.Op, status dc.Status, seconds float64) {
	m.replies[replyKey{op, status}]++
	m.requests.observe(op.String(), seconds)
}

type collector struct{ s *Shim }

func (collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.stats()
	server := st.Server
	emit := func(name, help string, kind prometheus.ValueType, value float64, labels ...[2]string) {
		names, values := []string{"server"}, []string{server}
		for _, l := range labels {
			names, values = append(names, l[0]), append(values, l[1])
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, help, names, nil), kind, value, values...)
	}
	byKind := func(name, help, label string, values map[string]uint64, zeros []string) {
		all := map[string]uint64{}
		for _, k := range zeros {
			all[k] = 0
		}
		for k, v := range values {
			all[k] = v
		}
		keys := make([]string, 0, len(all))
		for k := range all {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			emit(name, help, prometheus.CounterValue, float64(all[k]), [2]string{label, k})
		}
	}
	byKind("distcache_shim_requests_total", "Requests received, by op (before any is refused).", "op", st.Requests, nil)
	s.mu.Lock()
	replies := map[replyKey]uint64{}
	for k, v := range s.metrics.replies {
		replies[k] = v
	}
	type hist struct {
		label string
		h     histogram
	}
	snapshot := func(b byLabel) []hist {
		var out []hist
		for k, h := range b {
			out = append(out, hist{k, histogram{counts: slices.Clone(h.counts), sum: h.sum, n: h.n}})
		}
		slices.SortFunc(out, func(a, b hist) int { return cmpString(a.label, b.label) })
		return out
	}
	requests, phases := snapshot(s.metrics.requests), snapshot(s.metrics.phases)
	queue := histogram{counts: slices.Clone(s.metrics.queue.counts), sum: s.metrics.queue.sum, n: s.metrics.queue.n}
	s.mu.Unlock()
	for k, v := range replies {
		emit("distcache_shim_replies_total", "Replies sent, by op and status.", prometheus.CounterValue, float64(v),
			[2]string{"op", k.op.String()}, [2]string{"status", k.status.String()})
	}
	byKind("distcache_shim_errors_total", "Requests that failed or were refused, by kind.", "kind", st.Errors, errorKinds)
	byKind("distcache_shim_malformed_total", "Datagrams dropped as malformed, by reason.", "reason", st.Malformed, nil)
	byKind("distcache_shim_refused_total", "Malformed requests answered at once (TOO_LARGE, BAD_REQUEST), by status.",
		"status", st.Refused, nil)
	byKind("distcache_shim_duplicates_total", "Retried writes not applied again (answered again, or still in "+
		"progress).", "kind", st.Duplicates, duplicateKinds)
	gauge := func(name, help string, v float64) { emit(name, help, prometheus.GaugeValue, v) }
	total := func(name, help string, v float64) { emit(name, help, prometheus.CounterValue, v) }
	gauge("distcache_shim_dedup_entries", "Writes remembered for the retry span (past distcache_shim_dedup_capacity "+
		"new writes are refused BUSY).", float64(st.Dedup.Entries))
	gauge("distcache_shim_dedup_capacity", "Writes the dedup table's memory bound holds.", float64(st.Dedup.Capacity))
	gauge("distcache_shim_stream_bytes", "Bytes of requests and replies in flight on the stream path (past "+
		"distcache_shim_stream_budget: BUSY).", float64(st.Stream.Bytes))
	gauge("distcache_shim_stream_budget", "The stream path's bound on bytes in flight.", float64(st.Stream.Budget))
	gauge("distcache_shim_stream_connections", "Stream-path connections open.", float64(st.Stream.Connections))
	co := st.Coherence
	for _, p := range [][3]any{{"invalidate", co.Invalidates, co.FailedInvalidates}, {"update", co.Updates, co.FailedUpdates}} {
		emit("distcache_shim_coherence_messages_total", "Coherence exchanges started, by phase (1: invalidate, 2: "+
			"update), one per path.", prometheus.CounterValue, float64(p[1].(uint64)), [2]string{"phase", p[0].(string)})
	}
	for _, p := range [][3]any{{"invalidate", co.Invalidates, co.FailedInvalidates}, {"update", co.Updates, co.FailedUpdates}} {
		emit("distcache_shim_coherence_failures_total", "Coherence exchanges that ended without an acknowledgement, "+
			"by phase.", prometheus.CounterValue, float64(p[2].(uint64)), [2]string{"phase", p[0].(string)})
	}
	total("distcache_shim_coherence_retransmits_total", "Coherence messages sent again (no ack in time).",
		float64(co.Retransmits))
	total("distcache_shim_coherence_stray_acks_total", "Acknowledgements nobody waited for.", float64(co.StrayAcks))
	total("distcache_shim_rate_spent_total", "Request-equivalents admitted under the server's rate (requests, and 2 "+
		"per coherence path of a cached key's write); 0 without a rate limit.", st.RateSpent)
	gauge("distcache_shim_rate_limit", "The server's rate (server_rate, request-equivalents per second); 0: no limit.",
		s.cluster.ServerRate)
	total("distcache_shim_redis_restarts_total", "Times its redis-server came back as a new process.",
		float64(st.RedisRestarts))
	up := 1.0
	if st.RedisDown {
		up = 0
	}
	gauge("distcache_shim_redis_up", "1 while its redis-server answers.", up)
	gauge("distcache_shim_cached_keys", "Keys some switch may cache, as this shim knows them.", float64(st.CachedKeys))
	known := 0.0
	if st.ViewKnown {
		known = 1
	}
	gauge("distcache_shim_view_known", "1 once it knows which switches cache which of its keys.", known)
	gauge("distcache_shim_epoch", "The controller's partition epoch it holds.", float64(st.Epoch))
	histo := func(name, help, label string, hs []hist) {
		for _, h := range hs {
			d := prometheus.NewDesc(name, help, []string{"server", label}, nil)
			ch <- prometheus.MustNewConstHistogram(d, h.h.n, h.h.sum, h.h.cumulative(), server, h.label)
		}
	}
	histo("distcache_shim_request_seconds", "Received until answered, by op.", "op", requests)
	ch <- prometheus.MustNewConstHistogram(prometheus.NewDesc("distcache_shim_queue_seconds",
		"Time a request waited in the server rate's queue.", []string{"server"}, nil), queue.n, queue.sum,
		queue.cumulative(), server)
	histo("distcache_shim_coherence_phase_seconds", "A write's phase 1 (invalidate every copy) and phase 2 (update "+
		"the copies), by phase.", "phase", phases)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// exposition is the shim's series in Prometheus' text format (what Metrics answers).
func (s *Shim) exposition() ([]byte, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(collector{s}); err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}
