package kubetest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		give Options
		want string // in the error; "" for none
	}{
		{name: "zero", give: Options{}},
		{name: "HA defaults", give: Options{Replicas: 2}},
		{name: "HA set", give: Options{Replicas: 3, HealthCheckInterval: time.Second, UnhealthyThreshold: 3, HealthyThreshold: 2, GoawayChance: 0.02, ShutdownDelay: time.Second}},
		{name: "typed flags on one server", give: Options{GoawayChance: 0.001, ShutdownDelay: time.Second}},
		{name: "negative replicas", give: Options{Replicas: -1}, want: "Options.Replicas is -1"},
		{name: "balancer without replicas", give: Options{HealthCheckInterval: time.Second}, want: "Options.HealthCheckInterval is 1s, but there is no load balancer: Options.Replicas is 0"},
		{name: "threshold without replicas", give: Options{Replicas: 1, UnhealthyThreshold: 2}, want: "Options.UnhealthyThreshold is 2, but there is no load balancer: Options.Replicas is 1"},
		{name: "negative interval", give: Options{Replicas: 2, HealthCheckInterval: -time.Second}, want: "Options.HealthCheckInterval is -1s"},
		{name: "negative threshold", give: Options{Replicas: 2, HealthyThreshold: -1}, want: "Options.HealthyThreshold is -1"},
		{name: "goaway over kube-apiserver's maximum", give: Options{GoawayChance: 0.05}, want: "Options.GoawayChance is 0.05: want 0 (off) to 0.02"},
		{name: "negative shutdown delay", give: Options{ShutdownDelay: -time.Second}, want: "Options.ShutdownDelay is -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one with %q", err, tt.want)
			}
		})
	}
}

// testInterval is the health-check interval of the HA tests: short, to
// keep them quick.
const testInterval = 250 * time.Millisecond

// startHA starts a control plane as o says for one test and stops it when
// the test ends.
func startHA(t *testing.T, o Options) *Env {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs kube-apiserver and etcd: KUBEBUILDER_ASSETS is not set; `make test` builds them and sets it")
	}
	out := &tailWriter{}
	o.APIServerOutput = out
	began := time.Now()
	e := StartWith(o)
	t.Cleanup(func() {
		began := time.Now()
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
		t.Logf("stopped in %v", time.Since(began).Round(time.Millisecond))
		if t.Failed() {
			t.Logf("the control plane's last output:\n%s", out)
		}
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	t.Logf("started %d replicas in %v", o.Replicas, time.Since(began).Round(time.Millisecond))
	return e
}

// ownClient is a clientset of cfg with a connection pool of its own: a
// config with a dialer is not shared through client-go's transport cache.
// wrap, if not nil, wraps its transport.
func ownClient(t *testing.T, cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) *kubernetes.Clientset {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	cfg.WrapTransport = wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// freshClient is an HTTP client of cfg's server that dials for each
// request.
func freshClient(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// newConns counts the connections a request's client dialed rather than
// took from its pool.
func newConns(ctx context.Context, n *atomic.Int64) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if !i.Reused {
			n.Add(1)
		}
	}})
}

// TestHA: behind the load balancer, new connections take the replicas in
// turn; a killed replica gets connections, which fail, until its checks
// mark it out; a rolling restart is invisible to client-go.
func TestHA(t *testing.T) {
	t.Parallel()
	e := startHA(t, Options{Replicas: 2, HealthCheckInterval: testInterval})
	cfg := e.Config(t)
	if want := "https://" + e.Balancer().Addr; cfg.Host != want {
		t.Fatalf("Config's host is %s, want the load balancer's, %s", cfg.Host, want)
	}

	t.Run("spread", func(t *testing.T) {
		fresh := freshClient(t, cfg)
		before := e.Balancer()
		const n = 10
		for range n {
			if err := get(context.Background(), fresh, cfg.Host+"/readyz"); err != nil {
				t.Fatal(err)
			}
		}
		after := e.Balancer()
		d0 := after.Replicas[0].Conns - before.Replicas[0].Conns
		d1 := after.Replicas[1].Conns - before.Replicas[1].Conns
		if d0+d1 != n {
			t.Fatalf("%d new connections reached the replicas %d and %d times, want %d in all", n, d0, d1, n)
		}
		// Round robin splits them evenly while both replicas are in: one
		// failed check does not mark a replica out, but a busy machine
		// could fail two.
		bothIn := after.Replicas[0].ChecksFailed+after.Replicas[1].ChecksFailed == before.Replicas[0].ChecksFailed+before.Replicas[1].ChecksFailed
		if (bothIn && (d0 != n/2 || d1 != n/2)) || d0 == 0 || d1 == 0 {
			t.Errorf("%d new connections reached the replicas %d and %d times, want %d each", n, d0, d1, n/2)
		}

		// The balancer moves no connection: client-go's one HTTP/2
		// connection carries every request.
		cs := ownClient(t, cfg, nil)
		var dialed atomic.Int64
		ctx := newConns(context.Background(), &dialed)
		for range 100 {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := dialed.Load(); got != 1 {
			t.Errorf("100 requests of one client-go client dialed %d connections, want 1", got)
		}
	})

	t.Run("kill", func(t *testing.T) {
		// Killed just after a check passed, the replica stays in for
		// UnhealthyThreshold intervals: time for the dials below.
		checks := e.Balancer().Replicas[0].Checks
		waitFor(t, "a check of replica 0", func() bool { return e.Balancer().Replicas[0].Checks > checks })
		// The counts before the kill: a check may fail between the kill
		// and the next look.
		before := e.Balancer().Replicas[0]
		if err := e.StopReplica(0, Kill); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if s := e.Balancer().Replicas[0]; !s.In {
			t.Fatalf("replica 0 out as soon as it was killed, %d checks after one passed: %+v", s.Checks-before.Checks, s)
		}

		// TLS handshakes, not HTTPS requests: a client-go request on a busy
		// machine can outlast the UnhealthyThreshold intervals the replica
		// stays in, and the test is of the balancer, which resets a
		// connection it cannot forward: the handshake fails, where a
		// replica that serves completes it. No clock decides which.
		addr := e.Balancer().Addr
		dial := func() error {
			d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true}} // the replica's name is not the point
			c, err := d.DialContext(context.Background(), "tcp", addr)
			if err != nil {
				return err
			}
			return c.Close()
		}
		var failed, servedAfterOut int
		var out ReplicaStats
		var outAfter, servedAfter time.Duration
		for servedAfterOut < 4 {
			if time.Since(killed) > 10*time.Second {
				t.Fatalf("10s after the kill: %d connections failed, %d served after replica 0 was out; replica 0: %+v", failed, servedAfterOut, e.Balancer().Replicas[0])
			}
			s := e.Balancer().Replicas[0]
			if !s.In && out.Addr == "" {
				out, outAfter = s, time.Since(killed)
			}
			err := dial()
			switch {
			case err != nil && s.In:
				failed++
			case err != nil:
				t.Errorf("with replica 0 out, a connection through the load balancer: %v", err)
			case !s.In:
				if servedAfterOut == 0 {
					servedAfter = time.Since(killed)
				}
				servedAfterOut++
			}
		}
		t.Logf("after SIGKILL: %d connections failed; replica 0 out after %v, %d checks, %d failed; served again after %v",
			failed, outAfter.Round(time.Millisecond), out.Checks-before.Checks, out.ChecksFailed-before.ChecksFailed, servedAfter.Round(time.Millisecond))
		if failed == 0 {
			t.Error("no connection failed: the balancer stopped sending to the killed replica before a check failed")
		}
		if got := out.DialErrors - before.DialErrors; got != int64(failed) {
			t.Errorf("the balancer counted %d dial errors of replica 0, the client %d failed connections", got, failed)
		}
		if got := out.ChecksFailed - before.ChecksFailed; got < DefaultUnhealthyThreshold {
			t.Errorf("replica 0 out after %d failed checks, want %d (UnhealthyThreshold)", got, DefaultUnhealthyThreshold)
		}

		began := time.Now()
		if err := e.StartReplica(0); err != nil {
			t.Fatal(err)
		}
		t.Logf("started again and in in %v", time.Since(began).Round(time.Millisecond))
		if s := e.Balancer().Replicas[0]; !s.In {
			t.Errorf("StartReplica returned with replica 0 out: %+v", s)
		}
	})

	t.Run("rolling restart", func(t *testing.T) {
		var status429, dialed, done, slowest atomic.Int64
		var mu sync.Mutex
		var errs []error
		cs := ownClient(t, cfg, func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if err == nil && resp.StatusCode == http.StatusTooManyRequests {
					status429.Add(1)
				}
				return resp, err
			})
		})
		ctx, cancel := context.WithCancel(context.Background())
		traced := newConns(ctx, &dialed)
		// The client's one connection, to one replica, before the restart.
		if _, err := cs.CoreV1().Namespaces().Get(traced, "default", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		before := e.Balancer()
		var wg sync.WaitGroup
		work := func(request func(i int) error) {
			wg.Go(func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					began := time.Now()
					err := request(i)
					if took := int64(time.Since(began)); took > slowest.Load() {
						slowest.Store(took) // one writer per worker: a lost race loses a near tie
					}
					if err != nil && ctx.Err() == nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					done.Add(1)
				}
			})
		}
		work(func(int) error {
			_, err := cs.CoreV1().Namespaces().Get(traced, "default", metav1.GetOptions{})
			return err
		})
		work(func(i int) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rolling-%d", i)}}
			_, err := cs.CoreV1().ConfigMaps("default").Create(traced, cm, metav1.CreateOptions{})
			return err
		})

		began := time.Now()
		err := e.RollingRestart(Graceful)
		took := time.Since(began)
		cancel()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		after := e.Balancer()
		t.Logf("rolling restart in %v: %d requests, %d errors, %d answered 429, %d connections dialed, slowest request %v",
			took.Round(time.Millisecond), done.Load(), len(errs), status429.Load(), dialed.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
		if len(errs) > 0 {
			t.Errorf("%d requests failed during a graceful rolling restart, the first: %v", len(errs), errs[0])
		}
		// The replica the client was on closes its connection as it
		// stops, and the client's next one goes to the other.
		redialed := dialed.Load() - 1
		if redialed < 1 {
			t.Error("client-go dialed no new connection: it was on neither replica as it stopped")
		}
		var conns int64
		for i := range after.Replicas {
			conns += after.Replicas[i].Conns - before.Replicas[i].Conns
		}
		// Two requests that find no connection both dial (net/http keeps
		// one), so the balancer may see more than the client uses.
		if conns < redialed {
			t.Errorf("the balancer saw %d new connections, the client dialed %d", conns, redialed)
		}
	})
}

// With --goaway-chance a client's HTTP/2 connection is closed now and then
// after a response, and its next one goes to the other replica; no request
// fails, and the replicas restart cleanly.
func TestHAGoaway(t *testing.T) {
	t.Parallel()
	e := startHA(t, Options{Replicas: 2, HealthCheckInterval: testInterval, GoawayChance: 0.02})
	cfg := e.Config(t)
	cs := ownClient(t, cfg, nil)
	var dialed atomic.Int64
	ctx := newConns(context.Background(), &dialed)
	before := e.Balancer()
	// At 0.02 a GOAWAY every 50 requests; none in 600 has a chance of
	// 0.98^599, 6e-6. Without the flag there is one connection, as in
	// TestHA/spread.
	const n = 600
	for i := range n {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	after := e.Balancer()
	var conns [2]int64
	for i := range conns {
		conns[i] = after.Replicas[i].Conns - before.Replicas[i].Conns
	}
	t.Logf("%d requests, %d connections: %v per replica", n, dialed.Load(), conns)
	if dialed.Load() < 2 {
		t.Errorf("%d requests dialed %d connections, want a new one after each GOAWAY", n, dialed.Load())
	}
	if conns[0]+conns[1] != dialed.Load() {
		t.Errorf("the balancer saw %d new connections, the client dialed %d", conns[0]+conns[1], dialed.Load())
	}
	if conns[0] == 0 || conns[1] == 0 {
		t.Errorf("new connections per replica %v: a GOAWAY did not move the client to the other replica", conns)
	}

	began := time.Now()
	if err := e.RestartReplica(0, Graceful); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica 0 restarted gracefully in %v", time.Since(began).Round(time.Millisecond))
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	for i, s := range e.Balancer().Replicas {
		if !s.In {
			t.Errorf("replica %d out after the restart: %+v", i, s)
		}
	}
	if err := e.StopReplica(2, Kill); err == nil || !strings.Contains(err.Error(), "replica 2") {
		t.Errorf("StopReplica(2) of 2 replicas: %v, want an error naming replica 2", err)
	}
	if err := errors.Join(e.StopReplica(1, Kill), e.StopReplica(1, Kill)); err == nil || !strings.Contains(err.Error(), "stopped already") {
		t.Errorf("StopReplica twice: %v, want an error saying it is stopped", err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
