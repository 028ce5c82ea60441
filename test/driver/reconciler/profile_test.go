package reconciler_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"
)

// profileSeconds is how long profile samples the API server: the first
// seconds of a mode, which every mode outlasts on two cores (each takes
// 13 s or more at 10,000 sandboxes).
const profileSeconds = 12

var profileRun atomic.Int64

// profile, when KUBEWIRE_BENCH_PPROF names a directory, writes CPU
// profiles of one timed mode there: this process's (<name>-N-client.pprof)
// for the whole mode, and the API server's (<name>-N-server.pprof) for its
// first profileSeconds, read from the API server's /debug/pprof. The
// returned function ends the mode's profiles; it does nothing when the
// variable is unset, which is how make bench and make test run.
//
// The files are numbered in the order the modes ran, the benchmark's
// first call (b.N = 1) included: raw-1, watched-2, reconciler-3, then
// the -benchtime run's.
//
//	KUBEWIRE_BENCH_PPROF=/tmp/prof go test -run '^$' -bench BenchmarkFenceChangeCeiling -benchtime 2x .
//	go tool pprof -top /tmp/prof/reconciler-3-server.pprof
func (rg *fenceRig) profile(b *testing.B, name string) (stop func()) {
	b.Helper()
	dir := os.Getenv("KUBEWIRE_BENCH_PPROF")
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	base := filepath.Join(dir, fmt.Sprintf("%s-%d", name, profileRun.Add(1)))
	client, err := os.Create(base + "-client.pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(client); err != nil {
		b.Fatalf("KUBEWIRE_BENCH_PPROF: %v (it cannot run beside -cpuprofile)", err)
	}
	// Built here: a failure may stop the benchmark only from its own
	// goroutine.
	api := mustKube(b, rg.cfg).CoreV1().RESTClient()
	served := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), (profileSeconds+30)*time.Second)
		defer cancel()
		body, err := api.Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(profileSeconds)).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(base+"-server.pprof", body, 0o644)
		}
		served <- err
	}()
	return func() {
		pprof.StopCPUProfile()
		if err := client.Close(); err != nil {
			b.Error(err)
		}
		if err := <-served; err != nil {
			b.Errorf("the API server's profile: %v", err)
		}
	}
}
