package reconciler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kubewire/kubewire/driver/internal/drivertest"
)

// BenchmarkPass runs a reconcile pass over converged sandboxes (suspended,
// fence stale) on client-go's fake clientsets: the reconciler's own cost,
// without a wire or a server. It reports requests and writes per pass and
// the time per sandbox, which stays flat as the count grows: the cost is
// linear.
func BenchmarkPass(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("sandboxes=%d", n), func(b *testing.B) {
			f := drivertest.NewFake(b)
			f.AddFence(b, "team-a", "fence-a", 2)
			f.AddFence(b, "team-b", "fence-b", 2)
			for i := 0; i < n; i++ {
				f.AddSandbox(b, "team-a", fmt.Sprintf("sb-%05d", i), false, "fence-a", 1)
			}
			r := newReconciler(b, f.Driver(b, nil))
			ctx := context.Background()
			if _, err := r.Pass(ctx); err != nil { // probe
				b.Fatal(err)
			}
			before := f.Requests()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				stats, err := r.Pass(ctx)
				if err != nil || stats.Seen != n || stats.Actions != 0 {
					b.Fatalf("pass: %+v, %v", stats, err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(f.Requests()-before)/float64(b.N), "requests/pass")
			b.ReportMetric(float64(f.Mutations())/float64(b.N), "writes/pass")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/sandbox")
		})
	}
}
