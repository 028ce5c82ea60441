package main

import (
	"context"
	"flag"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
	"github.com/kubewire/kubewire/examples/gateway/internal/soak"
	"github.com/kubewire/kubewire/internal/roundtrip"
	"github.com/kubewire/kubewire/kubeadapter"
)

// soakConfig is TestSoak's run: 30 seconds with a fixed seed unless the
// -soak.* flags say otherwise (`make soak` runs ten minutes).
var soakConfig = soak.DefaultConfig()

func init() { soakConfig.RegisterFlags(flag.CommandLine) }

// TestSoak runs this gateway, its driver and reconciler under mixed
// connection faults and an API server restart, and fails on any write
// executed twice that is not marked idempotent, any acknowledged operation
// the API server's audit log or the final state contradicts, any sandbox
// whose final state the history does not imply, and any growth of
// goroutines, open files or heap. See internal/soak.
func TestSoak(t *testing.T) {
	rep := soak.Run(t, soakConfig, soakGateway())
	assert.False(t, rep.Failed(), "the soak broke a rule; see the report above")
	assert.NotZero(t, rep.Result.ByKind[soak.Create][soak.OK], "no sandbox was ever created")
}

// TestSoakCatchesDuplicates runs the gateway on a deliberately broken
// client, one that re-sends a POST that failed on a reset, under resets
// after the server answered: the checker must report the duplicated
// creates, and never as marked idempotent.
func TestSoakCatchesDuplicates(t *testing.T) {
	c := soak.DefaultConfig()
	c.Duration = 10 * time.Second
	c.Rates = map[string]float64{soak.FaultResetAfter: 240}
	c.Restart, c.FenceChanges = false, 0
	c.Kinds = []soak.Kind{soak.Create, soak.Delete}
	if soakConfig.Out != "" {
		c.Out = soakConfig.Out + "-duplicates"
	}
	var resent atomic.Int32
	rep := soak.Run(t, c, soakGateway(func(next http.RoundTripper) http.RoundTripper {
		return &resendPOST{Wrapped: roundtrip.Wrapped{Next: next}, resent: &resent}
	}))
	require.NotZero(t, resent.Load(), "the broken client never re-sent a POST; no reset hit one")
	assert.NotZero(t, rep.Result.DuplicateCreates, "the checker missed the re-sent creates")
	assert.True(t, rep.Result.Failed())
	for _, d := range rep.Result.Duplicates {
		if d.Verb == "create" {
			assert.False(t, d.Idempotent)
		}
	}
}

// soakGateway builds the gateway as main does, with the timeouts a
// gateway facing these faults would choose: a 5s timeout per attempt
// instead of 30s, and an HTTP/2 health check that finds a dead connection
// in about 4s instead of 45s. wrap goes under the kubewire stack.
func soakGateway(wrap ...func(http.RoundTripper) http.RoundTripper) soak.Gateway {
	return func(t testing.TB, cfg *rest.Config, ns string) (http.Handler, func()) {
		cfg = rest.CopyConfig(cfg)
		for _, w := range wrap {
			cfg.Wrap(w)
		}
		require.NoError(t, kubeadapter.Apply(cfg,
			kubeadapter.WithTimeout(5*time.Second),
			kubeadapter.WithHTTP2Health(2*time.Second, 2*time.Second),
		))
		d, err := driver.New(cfg, "soak", []string{ns})
		require.NoError(t, err)
		rec, err := reconciler.New(d)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- rec.Run(ctx) }()
		require.Eventually(t, rec.Synced, 30*time.Second, 10*time.Millisecond, "the reconciler's caches never synced")
		return newHandler(d, prometheus.NewRegistry(), logr.Discard(), nil, nil), func() {
			cancel()
			assert.ErrorIs(t, <-done, context.Canceled)
			d.Close()
		}
	}
}

// resendPOST is the broken client: a POST that fails is sent again,
// whatever may have reached the server.
type resendPOST struct {
	roundtrip.Wrapped
	resent *atomic.Int32
}

func (r *resendPOST) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.Next.RoundTrip(req)
	if err == nil || req.Method != http.MethodPost || req.GetBody == nil {
		return resp, err
	}
	body, gerr := req.GetBody()
	if gerr != nil {
		return nil, err
	}
	again := req.Clone(req.Context())
	again.Body = body
	r.resent.Add(1)
	return r.Next.RoundTrip(again)
}
