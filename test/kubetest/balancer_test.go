package kubetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHealthAfter(t *testing.T) {
	cfg := balancerConfig{unhealthy: 2, healthy: 2}
	tests := []struct {
		name string
		give string // checks in order: p passed, f failed
		want bool   // in after them, starting in
	}{
		{name: "passes", give: "ppp", want: true},
		{name: "one failure rides out", give: "f", want: true},
		{name: "two failures mark out", give: "ff", want: false},
		{name: "failures not in a row", give: "fpf", want: true},
		{name: "one pass is not enough to come back", give: "ffp", want: false},
		{name: "two passes bring it back", give: "ffpp", want: true},
		{name: "a failure between passes starts again", give: "ffpfp", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := health{in: true}
			for _, c := range tt.give {
				h = h.after(c == 'p', cfg)
			}
			if h.in != tt.want {
				t.Errorf("after %s: in %v, want %v", tt.give, h.in, tt.want)
			}
		})
	}
}

// fakeReplica is an HTTPS server whose /readyz answers ready's status and
// whose other paths name the replica.
type fakeReplica struct {
	srv   *httptest.Server
	ready atomic.Int32 // status of /readyz
}

func newFakeReplicas(t *testing.T, n int) []*fakeReplica {
	t.Helper()
	rs := make([]*fakeReplica, n)
	for i := range rs {
		r := &fakeReplica{}
		r.ready.Store(http.StatusOK)
		r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.URL.Path == "/readyz" {
				w.WriteHeader(int(r.ready.Load()))
				return
			}
			fmt.Fprint(w, i)
		}))
		t.Cleanup(r.srv.Close)
		rs[i] = r
	}
	return rs
}

// startFakeBalancer fronts rs with a balancer that checks every 20ms.
func startFakeBalancer(t *testing.T, rs []*fakeReplica) *balancer {
	t.Helper()
	// Every httptest server has the same certificate.
	check := &http.Client{Transport: &http.Transport{TLSClientConfig: rs[0].srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(), DisableKeepAlives: true}}
	b, err := newBalancer(balancerConfig{interval: 20 * time.Millisecond, unhealthy: 2, healthy: 1}, check)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, len(rs))
	for i, r := range rs {
		addrs[i] = r.srv.Listener.Addr().String()
	}
	b.start(addrs)
	t.Cleanup(func() {
		if err := b.close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// balancedClient is an HTTP/1.1 client of the replicas through b; with
// keepAlive false each request dials.
func balancedClient(t *testing.T, rs []*fakeReplica, keepAlive bool) *http.Client {
	t.Helper()
	tr := &http.Transport{
		TLSClientConfig:   rs[0].srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(),
		DisableKeepAlives: !keepAlive,
		// One connection, which the test follows.
		MaxConnsPerHost: 1,
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// served is the replica that answered GET / through b, or an error.
func served(c *http.Client, b *balancer) (int, error) {
	resp, err := c.Get("https://" + b.addr() + "/")
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1, err
	}
	return strconv.Atoi(string(body))
}

// waitFor polls cond every 5ms until it holds, failing after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not after 5s", what)
		case <-tick.C:
		}
	}
}

// The balancer sends each new connection to the next replica that is in;
// a replica whose checks fail gets no new ones but keeps its own; with
// every replica out a connection is refused; a replica that passes again
// is back.
func TestBalancer(t *testing.T) {
	rs := newFakeReplicas(t, 2)
	b := startFakeBalancer(t, rs)
	fresh := balancedClient(t, rs, false)

	var got []int
	for range 4 {
		i, err := served(fresh, b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, i)
	}
	if fmt.Sprint(got) != "[0 1 0 1]" && fmt.Sprint(got) != "[1 0 1 0]" {
		t.Errorf("4 new connections went to replicas %v, want each in turn", got)
	}

	// A pooled connection to replica 0.
	pooled := balancedClient(t, rs, true)
	for {
		i, err := served(pooled, b)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			break
		}
		pooled.CloseIdleConnections()
	}
	rs[0].ready.Store(http.StatusInternalServerError)
	waitFor(t, "replica 0 out", func() bool { return !b.stats().Replicas[0].In })
	if s := b.stats().Replicas[0]; s.ChecksFailed < 2 {
		t.Errorf("out after %d failed checks, want 2 (the threshold)", s.ChecksFailed)
	}
	if i, err := served(pooled, b); err != nil || i != 0 {
		t.Errorf("on the connection made before replica 0 was out: replica %d, %v; want 0: the balancer cuts no connection", i, err)
	}
	for range 3 {
		if i, err := served(fresh, b); err != nil || i != 1 {
			t.Errorf("new connection with replica 0 out: replica %d, %v; want 1", i, err)
		}
	}

	rs[1].ready.Store(http.StatusInternalServerError)
	waitFor(t, "replica 1 out", func() bool { return !b.stats().Replicas[1].In })
	refused := b.stats().Refused
	if _, err := served(fresh, b); err == nil {
		t.Error("with every replica out a new connection was served")
	}
	if got := b.stats().Refused - refused; got != 1 {
		t.Errorf("Refused went up by %d, want 1", got)
	}

	rs[0].ready.Store(http.StatusOK)
	waitFor(t, "replica 0 back in", func() bool { return b.stats().Replicas[0].In })
	if i, err := served(fresh, b); err != nil || i != 0 {
		t.Errorf("with replica 0 back: replica %d, %v; want 0", i, err)
	}
}

// A replica that is gone but not yet out resets the connections sent to
// it, as a network load balancer passes on a refusal, until its checks
// mark it out.
func TestBalancerDeadReplica(t *testing.T) {
	rs := newFakeReplicas(t, 2)
	// Checks far apart: the dead replica stays in while the test dials.
	check := &http.Client{Transport: &http.Transport{TLSClientConfig: rs[0].srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone(), DisableKeepAlives: true}}
	b, err := newBalancer(balancerConfig{interval: time.Hour, unhealthy: 1, healthy: 1}, check)
	if err != nil {
		t.Fatal(err)
	}
	b.start([]string{rs[0].srv.Listener.Addr().String(), rs[1].srv.Listener.Addr().String()})
	t.Cleanup(func() { _ = b.close() })
	rs[0].srv.Close()
	fresh := balancedClient(t, rs, false)
	var failed, ok int
	for range 4 {
		i, err := served(fresh, b)
		switch {
		case err == nil && i == 1:
			ok++
		case err != nil && !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "Client.Timeout"):
			failed++
		default:
			t.Errorf("replica %d, %v", i, err)
		}
	}
	if failed != 2 || ok != 2 {
		t.Errorf("%d connections failed and %d were served, want 2 and 2", failed, ok)
	}
	if s := b.stats().Replicas[0]; s.DialErrors != 2 || s.Conns != 2 || !s.In {
		t.Errorf("replica 0: %+v, want 2 connections, both dial errors, still in", s)
	}
}
