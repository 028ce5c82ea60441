package soak

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

// Snapshot is what a leak would grow: goroutines, open file descriptors,
// and the live heap after a collection.
type Snapshot struct {
	Goroutines int    `json:"goroutines"`
	FDs        int    `json:"fds"`
	HeapBytes  uint64 `json:"heapBytes"`
}

// TakeSnapshot measures this process now.
func TakeSnapshot() Snapshot {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	fds := -1
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		fds = len(ents)
	}
	return Snapshot{Goroutines: runtime.NumGoroutine(), FDs: fds, HeapBytes: m.HeapAlloc}
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

// Settle takes snapshots until none grew beyond tol from start, or until
// timeout, and returns the last: goroutines and connections that are
// shutting down get the time to finish.
func Settle(start Snapshot, tol Tolerance, timeout time.Duration) Snapshot {
	deadline := time.Now().Add(timeout)
	for {
		s := TakeSnapshot()
		if len(start.Growth(s, tol)) == 0 || time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// steady takes snapshots until the goroutine count has not changed for a
// second (ten seconds at most): a baseline taken while the controllers
// beside the gateway are still starting would count their goroutines as
// the gateway's.
func steady() Snapshot {
	s := TakeSnapshot()
	since := time.Now()
	for deadline := since.Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		n := TakeSnapshot()
		if n.Goroutines != s.Goroutines {
			since = time.Now()
		}
		s = n
		if time.Since(since) >= time.Second {
			break
		}
	}
	return s
}

// dumpGoroutines writes every goroutine's stack, grouped, to path: what a
// leak report points at.
func dumpGoroutines(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("goroutine").WriteTo(f, 1)
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
