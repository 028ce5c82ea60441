package soak

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// Snapshot is what a leak of the gateway process would grow, as its
// /metrics reports it: goroutines, open file descriptors, and the heap in
// use. The process is not asked to collect garbage first, so the heap is
// what the last collection left plus what was allocated since.
type Snapshot struct {
	Goroutines int    `json:"goroutines"`
	FDs        int    `json:"fds"`
	HeapBytes  uint64 `json:"heapBytes"`
}

// The gauges of a [Snapshot]: client_golang's Go and process collectors.
const (
	metricGoroutines = "go_goroutines"
	metricFDs        = "process_open_fds"
	metricHeap       = "go_memstats_heap_inuse_bytes"
)

// TakeSnapshot reads the gateway's /metrics through h.
func TakeSnapshot(h http.Handler) (Snapshot, error) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return Snapshot{}, fmt.Errorf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		switch name {
		case metricGoroutines, metricFDs, metricHeap:
		default:
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil {
			return Snapshot{}, fmt.Errorf("GET /metrics: line %q", sc.Text())
		}
		got[name] = v
	}
	for _, name := range []string{metricGoroutines, metricFDs, metricHeap} {
		if _, ok := got[name]; !ok {
			return Snapshot{}, fmt.Errorf("GET /metrics: no %s", name)
		}
	}
	return Snapshot{Goroutines: int(got[metricGoroutines]), FDs: int(got[metricFDs]), HeapBytes: uint64(got[metricHeap])}, nil
}

// Tolerance is how much a snapshot may exceed another before it counts as
// growth.
type Tolerance struct {
	Goroutines int    `json:"goroutines"`
	FDs        int    `json:"fds"`
	HeapBytes  uint64 `json:"heapBytes"`
}

// Growth returns what grew beyond tol from s to end, as sentences; none
// when nothing did.
func (s Snapshot) Growth(end Snapshot, tol Tolerance) []string {
	var out []string
	if end.Goroutines > s.Goroutines+tol.Goroutines {
		out = append(out, fmt.Sprintf("goroutines %d -> %d (tolerance %d)", s.Goroutines, end.Goroutines, tol.Goroutines))
	}
	if end.FDs > s.FDs+tol.FDs {
		out = append(out, fmt.Sprintf("open fds %d -> %d (tolerance %d)", s.FDs, end.FDs, tol.FDs))
	}
	if end.HeapBytes > s.HeapBytes+tol.HeapBytes {
		out = append(out, fmt.Sprintf("heap %s -> %s (tolerance %s)", mib(s.HeapBytes), mib(end.HeapBytes), mib(tol.HeapBytes)))
	}
	return out
}

// Settle takes snapshots through h until none grew beyond tol from start,
// or until timeout, and returns the last: goroutines and connections that
// are shutting down get the time to finish.
func Settle(h http.Handler, start Snapshot, tol Tolerance, timeout time.Duration) (Snapshot, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := TakeSnapshot(h)
		if err != nil || len(start.Growth(s, tol)) == 0 || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// steady takes snapshots through h until the goroutine count has not
// changed for a second (ten seconds at most): a baseline taken while the
// gateway's informers are still starting would count their goroutines as
// growth.
func steady(h http.Handler) (Snapshot, error) {
	s, err := TakeSnapshot(h)
	since := time.Now()
	for deadline := since.Add(10 * time.Second); err == nil && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		var n Snapshot
		if n, err = TakeSnapshot(h); n.Goroutines != s.Goroutines {
			since = time.Now()
		}
		s = n
		if time.Since(since) >= time.Second {
			break
		}
	}
	return s, err
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
