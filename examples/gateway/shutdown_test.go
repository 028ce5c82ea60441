package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/test/kubetest"
)

// gatewayRun is run, started as main starts it, in a goroutine: stop
// cancels its context, which is what SIGTERM does in main.
type gatewayRun struct {
	addr string
	out  syncBuffer
	stop context.CancelFunc
	done chan struct{}
	code int // run's exit code, once done is closed
}

// startRun starts run with args, listening on a port of 127.0.0.1 the
// system chooses, and returns once it serves. When the test ends it
// stops run and waits for it.
func startRun(t *testing.T, args ...string) *gatewayRun {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	g := &gatewayRun{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		// Callers unauthenticated unless args say -authenticate (auth_test.go).
		g.code = run(ctx, append([]string{"-listen", "127.0.0.1:0", "-authenticate=false"}, args...), &g.out)
	}()
	t.Cleanup(func() {
		stop()
		<-g.done
		if t.Failed() {
			t.Logf("the gateway wrote:\n%s", g.out.String())
		}
	})
	serving := regexp.MustCompile(`msg=serving addr=(\S+)`)
	require.Eventually(t, func() bool {
		select {
		case <-g.done:
			return true
		default:
		}
		m := serving.FindStringSubmatch(g.out.String())
		if m != nil {
			g.addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "the gateway never served")
	require.NotEmpty(t, g.addr, "run returned %d before it served", g.code)
	return g
}

// wait waits for run to return and returns its exit code.
func (g *gatewayRun) wait() int {
	<-g.done
	return g.code
}

// holdingProxy is a plain-HTTP proxy in front of an API server that
// forwards every request as the user of the config it was made with, and
// holds the answers to the requests its hold function picks: the API
// server has received, executed and answered them, and their callers get
// the answer, unchanged, once Release is called. Nothing is dropped.
type holdingProxy struct {
	*httptest.Server
	held    chan string // "METHOD path status" of each answer held
	release chan struct{}
	once    sync.Once
}

func newHoldingProxy(t *testing.T, cfg *rest.Config, hold func(*http.Request) bool) *holdingProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	require.NoError(t, err)
	rt, err := rest.TransportFor(cfg)
	require.NoError(t, err)
	p := &holdingProxy{held: make(chan string, 16), release: make(chan struct{})}
	p.Server = httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     rt,
		FlushInterval: -1, // watches
		// A request its caller gave up on, which the test expects.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) },
		ModifyResponse: func(resp *http.Response) error {
			r := resp.Request
			if !hold(r) {
				return nil
			}
			p.held <- fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, resp.StatusCode)
			select {
			case <-p.release:
				return nil
			case <-r.Context().Done():
				return r.Context().Err()
			}
		},
	})
	// Cleanups run last first: release, then close.
	t.Cleanup(p.Close)
	t.Cleanup(p.Release)
	return p
}

// Release delivers the answers held, and those of later requests.
func (p *holdingProxy) Release() { p.once.Do(func() { close(p.release) }) }

// answer is what an HTTP client got.
type answer struct {
	code int
	err  error
}

// inFlight runs the gateway, with args, through a holding proxy in a
// namespace of its own, creates sandboxes alpha and beta through it, and
// sends a DELETE of alpha and a GET of beta, whose answers from the API
// server the proxy holds. It returns once the API server has answered
// both, and has applied the DELETE.
func inFlight(t *testing.T, args ...string) (g *gatewayRun, p *holdingProxy, del, get <-chan answer) {
	t.Helper()
	cfg := env.Config(t)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-drain-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	p = newHoldingProxy(t, cfg, func(r *http.Request) bool {
		return r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns.Name+"/sandboxes/alpha") ||
			r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns.Name+"/sandboxes/beta")
	})
	kubeconfig := kubetest.WriteKubeconfig(t, &rest.Config{Host: p.URL})
	g = startRun(t, append([]string{"-kubeconfig", kubeconfig, "-namespace", ns.Name, "-gateway", "gw-drain"}, args...)...)

	// A client of its own: its connections are the test's.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	base := "http://" + g.addr + "/v1/namespaces/" + ns.Name + "/sandboxes"
	send := func(method, url, body string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			req, err := http.NewRequest(method, url, strings.NewReader(body))
			if err != nil {
				ch <- answer{err: err}
				return
			}
			resp, err := hc.Do(req)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			ch <- answer{code: resp.StatusCode}
		}()
		return ch
	}
	for _, name := range []string{"alpha", "beta"} {
		a := <-send(http.MethodPost, base, `{"name":"`+name+`","podTemplate":`+template+`}`)
		require.NoError(t, a.err)
		require.Equal(t, http.StatusCreated, a.code, "create %s", name)
	}
	del = send(http.MethodDelete, base+"/alpha", "")
	get = send(http.MethodGet, base+"/beta", "")
	var held []string
	for range 2 {
		select {
		case h := <-p.held:
			held = append(held, h)
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the API server never answered the DELETE and the GET", "held: %v", held)
		}
	}
	require.Len(t, held, 2)
	for _, h := range held {
		// The DELETE was applied: the API server answered 200.
		assert.Regexp(t, `^(DELETE \S+/alpha|GET \S+/beta) 200$`, h)
	}
	return g, p, del, get
}

// stopAccepting sends SIGTERM's equivalent to g and waits until it no
// longer accepts connections.
func stopAccepting(t *testing.T, g *gatewayRun) {
	t.Helper()
	g.stop()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", g.addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 10*time.Millisecond, "the gateway still accepts connections after SIGTERM")
}

// TestRunAnswersInFlightOnShutdown: on SIGTERM the gateway stops
// accepting connections but answers the requests it accepted, a DELETE
// the API server has already applied and a GET, and run returns only
// once they are answered: main exits when run returns, so a request still
// in flight then would be cut off with its effect done and unreported.
func TestRunAnswersInFlightOnShutdown(t *testing.T) {
	g, p, del, get := inFlight(t)
	stopAccepting(t, g)
	// The answers are held; run must wait for them. A second is plenty
	// for a run that does not wait to return.
	select {
	case <-g.done:
		require.FailNow(t, "run returned with requests in flight", "exit code %d", g.code)
	case <-time.After(time.Second):
	}
	p.Release()
	a := <-del
	require.NoError(t, a.err, "DELETE")
	assert.Equal(t, http.StatusNoContent, a.code, "DELETE")
	a = <-get
	require.NoError(t, a.err, "GET")
	assert.Equal(t, http.StatusOK, a.code, "GET")
	assert.Equal(t, 0, g.wait(), "run's exit code")
}

// TestRunCutsOffAfterShutdownGrace: requests still unanswered when
// -shutdown-grace runs out are cut off, their callers get no answer (not
// a success the gateway could not confirm), and run returns 1 saying so.
func TestRunCutsOffAfterShutdownGrace(t *testing.T) {
	g, p, del, get := inFlight(t, "-shutdown-grace", "500ms")
	stopAccepting(t, g)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "run did not return after its grace period")
	}
	assert.Equal(t, 1, g.code, "run's exit code")
	assert.Contains(t, g.out.String(), "gateway: shutdown: -shutdown-grace 500ms ran out; cut off the requests still in flight, unanswered")
	for _, ch := range []<-chan answer{del, get} {
		a := <-ch
		assert.Error(t, a.err, "a request cut off was answered %d", a.code)
	}
	p.Release()
}
