package main

import (
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubewire/kubewire/driver"
)

// clientFrom returns an HTTP client whose connections come from the
// loopback address ip, a client address of its own to the gate; each
// keeps up to conns connections.
func clientFrom(t testing.TB, ip string, conns int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// call sends GET url with token from c and returns the status.
func call(c *http.Client, url, token string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Body.Close()
}

// flood sends GET url with a fresh random token from c on workers
// goroutines until ctx ends, and returns how many answers had each
// status.
func flood(ctx context.Context, c *http.Client, url string, workers int) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				code, err := call(c, url, "garbage-"+rand.Text())
				if err != nil {
					code = -1
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// TestGateFlood: while one client address floods the gateway with random
// bearer tokens on 64 connections, a caller let in before the flood keeps
// being answered 200 after its cache entry expired (a second here), and a
// caller that arrives during the flood with a valid token is let in. The
// flood spends its own address's budget (429): the tokens reviewed are
// bounded by that budget. Before, every garbage token was reviewed (2898
// in this test, 2938 reviews), and the callers' reviews queued behind them in
// the review clients' limit, which under a larger flood answered them 401
// (TestThrottledReviewIs503).
func TestGateFlood(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-flood-")
	admitted := applyCaller(t, cs, []string{ns.Name}, "admitted")
	// Another token of the same account: one the gate has not seen.
	newcomer := freshToken(t, cs, ns.Name, "admitted")
	var reviews reviewCounter
	url := gatedServer(t, cfg, ns.Name, time.Second, &reviews) + "/v1/namespaces/" + ns.Name + "/sandboxes"
	caller := clientFrom(t, "127.0.0.1", 1)
	code, err := call(caller, url, admitted)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "before the flood")

	ctx, cancel := context.WithCancel(context.Background())
	flooded := make(chan map[int]int, 1)
	before := reviews.n.Load()
	start := time.Now()
	go func() { flooded <- flood(ctx, clientFrom(t, "127.0.0.2", 64), url, 64) }()
	// Past the admitted caller's cache entry.
	time.Sleep(1500 * time.Millisecond)
	var got []int
	for i := range 20 {
		token := admitted
		if i%2 == 1 {
			token = newcomer
		}
		code, err := call(caller, url, token)
		require.NoError(t, err)
		got = append(got, code)
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	codes := <-flooded
	elapsed := time.Since(start)
	t.Logf("callers: %v; flood: %v; reviews during the flood: %d", got, codes, reviews.n.Load()-before)
	for i, code := range got {
		assert.Equal(t, http.StatusOK, code, "request %d of the callers", i)
	}
	assert.Positive(t, codes[http.StatusTooManyRequests], "the flood spends its own budget")
	// A flood token the budget let through is reviewed and rejected: 401.
	// At most the address's burst and its rate over the flood.
	reviewed := codes[http.StatusUnauthorized]
	assert.Positive(t, reviewed, "the flood's tokens within its budget are reviewed")
	limit := float64(defaultLimits.clientBurst) + defaultLimits.clientQPS*elapsed.Seconds()
	assert.LessOrEqual(t, float64(reviewed), limit, "flood tokens reviewed in %v", elapsed)
}

// TestThrottledReviewIs503: callers whose valid tokens arrive together,
// more than the review clients' limit lets through in time, are answered
// 200 or 503 with Retry-After, never 401: the limit gave no verdict on
// their tokens. Before, client-go's "rate: Wait(n=1) would exceed context
// deadline" was taken for a rejection.
func TestThrottledReviewIs503(t *testing.T) {
	cfg, cs, ns := newNamespace(t, "gw-throttle-")
	applyCaller(t, cs, []string{ns.Name}, "many")
	const callers = 24
	tokens := make([]string, callers)
	for i := range tokens {
		tokens[i] = freshToken(t, cs, ns.Name, "many")
	}
	d, err := driver.New(cfg, "gw-throttle", []string{ns.Name})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	lim := defaultLimits
	lim.reviewQPS, lim.reviewBurst = 1, 1
	// One address, many tokens: its own budget out of the way.
	lim.clientBurst, lim.unknownBurst = 1000, 1000
	g, err := newGateWith(cfg, nil, time.Hour, lim, logr.Discard())
	require.NoError(t, err)
	srv := httptest.NewServer(newHandler(d, prometheus.NewRegistry(), logr.Discard(), g, nil))
	t.Cleanup(srv.Close)
	url := srv.URL + "/v1/namespaces/" + ns.Name + "/sandboxes"

	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
		noRA  atomic.Int32
	)
	for _, token := range tokens {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodGet, url, nil)
			if !assert.NoError(t, err) {
				return
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				noRA.Add(1)
			}
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("answers: %v", codes)
	assert.Zero(t, codes[http.StatusUnauthorized], "valid tokens answered 401")
	assert.Positive(t, codes[http.StatusServiceUnavailable], "the limit held some reviews past their deadline")
	assert.Equal(t, callers, codes[http.StatusOK]+codes[http.StatusServiceUnavailable], "answers other than 200 and 503")
	assert.Zero(t, noRA.Load(), "503 without Retry-After")
}

// freshToken returns a new token of the ServiceAccount ns/name.
func freshToken(t testing.TB, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}
