package rig

import (
	"context"
	"fmt"
	"net/http"
	"os"
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

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/test/kubetest"
	"github.com/kubewire/kubewire/test/sandboxtest"
)

// Rig is one API server with the real controller and a fake kubelet for
// one fresh namespace.
type Rig struct {
	Cfg     *rest.Config
	CS      kubernetes.Interface
	NS      string
	Kubelet *kubetest.Kubelet
}

// Current runs agent-sandbox's controller of the release the build
// selects in process, against the package's API server, with that
// release's CRD. hack/matrix.sh runs the suites at each release the
// driver supports.
func Current(t *testing.T) *Rig {
	r := New(t, env.Config(t))
	sandboxtest.RunController(t, r.Cfg, r.NS)
	return r
}

func New(t *testing.T, cfg *rest.Config) *Rig {
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sandboxes-"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &Rig{Cfg: cfg, CS: cs, NS: ns.Name, Kubelet: kubetest.RunKubelet(t, cfg, ns.Name)}
}

// Driver returns a driver for the Rig's namespace whose requests go
// through counter, if not nil.
func (r *Rig) Driver(t *testing.T, counter *Writes, opts ...driver.Option) *driver.Driver {
	cfg := rest.CopyConfig(r.Cfg)
	if counter != nil {
		cfg.Wrap(counter.Wrap)
	}
	d, err := driver.New(cfg, "gw", []string{r.NS}, opts...)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// WaitPhase waits until the sandbox reaches want and returns it.
func WaitPhase(t *testing.T, d *driver.Driver, ns, name string, want driver.Phase) driver.Sandbox {
	t.Helper()
	var got driver.Sandbox
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		got, err = d.Get(context.Background(), ns, name)
		require.NoError(c, err)
		assert.Equal(c, want, got.Phase)
	}, Settle, 20*time.Millisecond, "sandbox %s/%s never reached %s", ns, name, want)
	return got
}

// Writes counts the requests that change sandboxes, per sandbox name, at
// the driver's transport; fail, when set, answers instead of the server.
type Writes struct {
	mu      sync.Mutex
	patches map[string]int
	applied map[string]int // sandbox PATCHes answered 2xx, by name
	refused int            // sandbox PATCHes refused with 409 Conflict
	sending int            // sandbox PATCHes sent and not yet answered
	at      []time.Time    // when each sandbox PATCH was sent
	other   int            // every other request but a read, an Event or a Lease
	events  int
	fail    func(*http.Request) bool
}

func NewWrites() *Writes { return &Writes{patches: map[string]int{}, applied: map[string]int{}} }

func (w *Writes) Wrap(rt http.RoundTripper) http.RoundTripper {
	return RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		w.mu.Lock()
		fail := w.fail
		p := req.URL.Path
		switch {
		case req.Method == http.MethodGet:
		case strings.HasPrefix(p, "/apis/events.k8s.io/"):
			w.events++
		case strings.HasPrefix(p, "/apis/coordination.k8s.io/"):
			// Leader election renews and releases its Lease.
		case req.Method == http.MethodPatch && strings.Contains(p, "/sandboxes/"):
			w.patches[p[strings.LastIndex(p, "/")+1:]]++
			w.at = append(w.at, time.Now())
			w.sending++
			defer w.answered()
		default:
			w.other++
		}
		w.mu.Unlock()
		if fail != nil && fail(req) {
			return nil, &net503{}
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && req.Method == http.MethodPatch && strings.Contains(p, "/sandboxes/") {
			w.mu.Lock()
			switch {
			case resp.StatusCode == http.StatusConflict:
				w.refused++
			case resp.StatusCode/100 == 2:
				w.applied[p[strings.LastIndex(p, "/")+1:]]++
			}
			w.mu.Unlock()
		}
		return resp, err
	})
}

// answered counts a sandbox PATCH out of sending, after its refusal, if
// any, was counted.
func (w *Writes) answered() {
	w.mu.Lock()
	w.sending--
	w.mu.Unlock()
}

// Settled waits until every sandbox PATCH sent has its answer counted. A
// sandbox seen in the state a PATCH gave it may still have that PATCH's
// answer on its way back: a count of what was refused is read after this.
func (w *Writes) Settled(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.sending == 0
	}, Settle, 5*time.Millisecond, "sandbox PATCHes still unanswered")
}

func (w *Writes) Reset() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.patches
	w.patches = map[string]int{}
	w.at = nil
	out["(any other write)"] = w.other
	w.other = 0
	return out
}

// Applied returns, by sandbox name, how many sandbox PATCHes the API
// server answered 2xx since the last call, and forgets them. Call Settled
// first.
func (w *Writes) Applied() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.applied
	w.applied = map[string]int{}
	return out
}

// Refused returns how many sandbox PATCHes the API server refused with 409
// Conflict since the last call, and forgets them.
func (w *Writes) Refused() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.refused
	w.refused = 0
	return n
}

// SentAt returns when each sandbox PATCH since the last Reset was sent.
func (w *Writes) SentAt() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time(nil), w.at...)
}

// SetFail makes the requests fail returns true for fail with a transport
// error instead of reaching the server; nil stops it.
func (w *Writes) SetFail(fail func(*http.Request) bool) {
	w.mu.Lock()
	w.fail = fail
	w.mu.Unlock()
}

// RoundTripFunc is an http.RoundTripper made of a function.
type RoundTripFunc func(*http.Request) (*http.Response, error)

func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// net503 is a transport failure the test injects.
type net503 struct{}

func (*net503) Error() string { return "injected: connection refused" }

// Config returns a config for the package's kube-apiserver, which [Main]
// started; it fails the test if that did not start.
func Config(t testing.TB) *rest.Config { return env.Config(t) }

// CompactEtcd compacts the history of [Main]'s etcd to its current
// revision and waits for it ([kubetest.Env.CompactEtcd]); it fails the
// test if it cannot.
func CompactEtcd(t testing.TB) {
	t.Helper()
	Config(t)
	if _, err := env.CompactEtcd(context.Background()); err != nil {
		t.Fatal(err)
	}
}

var env *kubetest.Env

// Main runs the package's tests with a kube-apiserver that serves
// agent-sandbox's Sandbox CRD; call it from TestMain.
func Main(m *testing.M) {
	crd, err := sandboxtest.SandboxCRD()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, &env, crd)
}
