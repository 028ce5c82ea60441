// Package kubetest is the test rig of real parts that needs no
// Kubernetes module beyond client-go and its api and apimachinery: a
// kube-apiserver and etcd started from the binaries in
// KUBEBUILDER_ASSETS, which `make test` builds from Go modules, with the
// flags controller-runtime's envtest gives them; a fault proxy in front of
// it; and a fake kubelet that runs the pods, since there are no nodes. It
// is a module of its own so that kubeadapter's tests run it at every
// client-go release kubeadapter supports (controller-runtime's envtest
// would pin client-go to its own release). The agent-sandbox half is
// [github.com/kubewire/kubewire/test/sandboxtest].
//
// # An HA control plane
//
// [Options.Replicas] of 2 or more starts that many kube-apiservers on one
// etcd, as a highly available cluster runs them: each on its own port, all
// with the same certificates, service-account signing key and issuer, so
// that any of them serves any client. In front of them is a load balancer
// on 127.0.0.1, the one address of [Env.Config], [Env.AddUser] and
// [WriteKubeconfig]; the serving certificate, for 127.0.0.1, is valid for
// it too. It behaves as a cloud's network load balancer does:
//
//   - It forwards TCP and sees no TLS: each new connection goes to the next
//     replica in round robin, and stays there.
//   - Every [Options.HealthCheckInterval] it checks each replica's /readyz
//     on a new connection. [Options.UnhealthyThreshold] failures in a row
//     (2) mark a replica out; [Options.HealthyThreshold] passes (1) mark it
//     back in. Until then a replica that is gone still gets new
//     connections, which the balancer resets: a crash is visible to new
//     connections for up to UnhealthyThreshold intervals.
//   - A replica out gets no new connections; the balancer cuts none of its
//     existing ones (the replica does). With every replica out, new
//     connections are reset at once.
//
// [Env.Balancer] reads its counters. [Env.StopReplica],
// [Env.StartReplica], [Env.RestartReplica] and [Env.RollingRestart]
// stop replicas with SIGTERM ([Graceful]) or SIGKILL ([Kill]);
// [Env.RestartAPIServer] is a graceful rolling restart.
//
// Each replica gets --shutdown-send-retry-after=true and a
// --shutdown-delay-duration longer than the balancer takes to mark it out
// ([Options.ShutdownDelay]), as a cluster's upgrade needs. After SIGTERM
// a replica fails /readyz at once but serves normally for the delay; then
// it answers requests that arrive while others drain 429 with
// Retry-After: 5 and Connection: close, sends its connections a GOAWAY,
// stops listening and exits, a second or so later. A client whose
// connection was on it moves to another replica on its next request; one
// that meets the 429 waits the 5 seconds first, as client-go does.
// [Options.GoawayChance] sets --goaway-chance, which closes a client's
// HTTP/2 connection after a response now and then, so that clients spread
// over the replicas again.
//
// The replicas share one host, so they share the identity lease named
// after its hostname and advertise one address for the kubernetes
// Service: no test should rely on either.
package kubetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// Env is a running API server.
type Env struct {
	cp  *controlPlane
	cfg *rest.Config
	err error
}

// Options configure [StartWith].
type Options struct {
	// CRDPaths are files of CRDs, one or more YAML documents each (not
	// directories, which envtest also took), installed once the API
	// server runs.
	CRDPaths []string
	// APIServerArgs are kube-apiserver flags, by name without dashes, set
	// over the defaults, those of an HA control plane and those of
	// GoawayChance and ShutdownDelay included.
	APIServerArgs map[string]string
	// APIServerOutput receives the processes' output; nil discards it.
	APIServerOutput io.Writer

	// Replicas is the number of kube-apiservers; 0 is 1. Two or more make
	// an HA control plane behind a load balancer (see the package doc).
	Replicas int
	// HealthCheckInterval is the load balancer's time between health
	// checks of a replica (GET /readyz on a new connection, which fails
	// without a 200 within the interval or 1s, whichever is longer); 0 is
	// [DefaultHealthCheckInterval] (1s). Only with Replicas of 2 or more.
	HealthCheckInterval time.Duration
	// UnhealthyThreshold is how many consecutive failed checks mark a
	// replica out; 0 is [DefaultUnhealthyThreshold] (2, as the network
	// load balancers of AWS and Google Cloud default to: one check slow on
	// a busy machine does not mark a replica out). Only with Replicas of 2
	// or more.
	UnhealthyThreshold int
	// HealthyThreshold is how many consecutive passed checks mark it back
	// in; 0 is [DefaultHealthyThreshold] (1). Only with Replicas of 2 or
	// more.
	HealthyThreshold int
	// GoawayChance is kube-apiserver's --goaway-chance: the fraction of
	// HTTP/2 requests whose connection it closes with a GOAWAY, so that
	// clients spread over the replicas again (0 to 0.02; HA clusters use
	// 0.001 to 0.02). 0 leaves the flag unset, and kube-apiserver's default
	// is off.
	GoawayChance float64
	// ShutdownDelay is kube-apiserver's --shutdown-delay-duration: how long
	// it keeps serving after SIGTERM while /readyz fails. 0 leaves the flag
	// unset with one replica (kube-apiserver's default is 0); with two or
	// more it is set long enough for the load balancer to mark a stopping
	// replica out first: (UnhealthyThreshold+1) × HealthCheckInterval + 1s,
	// 4s with the defaults.
	ShutdownDelay time.Duration
}

// Start starts the API server if KUBEBUILDER_ASSETS is set. Call it from
// TestMain and Stop it after m.Run. CRDs are installed from crdPaths.
func Start(crdPaths ...string) *Env {
	return StartWith(Options{CRDPaths: crdPaths})
}

// StartWith starts the API server as o says if KUBEBUILDER_ASSETS is set.
// Its certificates stay the same until Stop, so that
// [Env.RestartAPIServer] brings it back with the same ones.
func StartWith(o Options) *Env {
	e := &Env{}
	if e.err = o.validate(); e.err != nil {
		return e
	}
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return e
	}
	args := o.APIServerArgs
	if typed := o.typedArgs(); len(typed) > 0 {
		maps.Copy(typed, args)
		args = typed
	}
	cpo := controlPlaneOptions{BinDir: dir, Args: args, Output: o.APIServerOutput}
	if o.Replicas > 1 {
		cpo.Replicas, cpo.Balancer = o.Replicas, o.balancerConfig()
	}
	e.cp, e.err = startControlPlane(cpo)
	if e.err != nil {
		e.err = fmt.Errorf("starting kube-apiserver and etcd from KUBEBUILDER_ASSETS=%s: %w", dir, e.err)
		return e
	}
	if e.cfg, e.err = e.AddUser("admin", "system:masters"); e.err == nil {
		e.err = installCRDs(e.cfg, o.CRDPaths)
	}
	return e
}

// Stop stops the API server and reports a process that crashed before.
func (e *Env) Stop() error {
	if e.cp == nil {
		return nil
	}
	return e.cp.stop()
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// etcd, address and certificates, as an upgrade or a crash-and-restart
// does; clients keep their configs. It returns once the new process is
// healthy. In an HA control plane it is [Env.RollingRestart] with
// [Graceful]: an upgrade, which its clients need not notice.
func (e *Env) RestartAPIServer() error {
	return e.cp.restartAPIServer()
}

// AddUser provisions a user of the API server (client certificate
// authentication) in groups and returns its config: a client whose
// requests the audit log tells apart.
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, error) {
	cert, key, err := e.cp.addUser(name, groups...)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            e.cp.host(),
		TLSClientConfig: rest.TLSClientConfig{CAData: e.cp.caPEM(), CertData: cert, KeyData: key},
		// A test API server need not be protected from its tests.
		QPS:   1000,
		Burst: 2000,
	}, nil
}

// installCRDs creates the CRDs in paths (YAML, one or more documents each)
// and waits until discovery serves every version of each, as envtest's
// WaitForCRDs does: until then a client's first request may 404.
func installCRDs(cfg *rest.Config, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	rc := cs.Discovery().RESTClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type crd struct {
		Spec struct {
			Group    string
			Names    struct{ Plural string }
			Versions []struct {
				Name   string
				Served bool
			}
		}
	}
	type served struct{ groupVersion, plural string }
	var want []served
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("CRD: %w", err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			body, err := yaml.YAMLToJSON(doc)
			if err != nil {
				return fmt.Errorf("CRD %s: %w", path, err)
			}
			var c crd
			if err := json.Unmarshal(body, &c); err != nil {
				return fmt.Errorf("CRD %s: %w", path, err)
			}
			if c.Spec.Group == "" {
				continue // an empty document
			}
			err = rc.Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
				SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
			if err != nil {
				return fmt.Errorf("installing CRD %s: %w", path, err)
			}
			for _, v := range c.Spec.Versions {
				if v.Served {
					want = append(want, served{c.Spec.Group + "/" + v.Name, c.Spec.Names.Plural})
				}
			}
		}
	}
	for _, w := range want {
		gv, plural := w.groupVersion, w.plural
		for {
			var list struct{ Resources []struct{ Name string } }
			raw, err := rc.Get().AbsPath("/apis/" + gv).DoRaw(ctx)
			if err == nil && json.Unmarshal(raw, &list) == nil &&
				slices.ContainsFunc(list.Resources, func(r struct{ Name string }) bool { return r.Name == plural }) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("CRD %s/%s not served by discovery after a minute: %w", gv, plural, errors.Join(err, ctx.Err()))
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Config returns a copy of the admin config of the API server (client
// certificate authentication). Without KUBEBUILDER_ASSETS the test is
// skipped with a note to run `make test`, which always sets it; if the API
// server could not start, the test fails.
func (e *Env) Config(t testing.TB) *rest.Config {
	t.Helper()
	if e.cp == nil && e.err == nil {
		t.Skip("needs a kube-apiserver: KUBEBUILDER_ASSETS is not set; `make test` builds the binaries and sets it")
	}
	if e.err != nil {
		t.Fatal(e.err)
	}
	return rest.CopyConfig(e.cfg)
}

// WriteKubeconfig writes cfg (CA, client certificate) as a kubeconfig in a
// temporary directory of t and returns its path.
func WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Main is TestMain for packages with API server tests: it starts the API
// server into *env (installing CRDs from crdPaths), runs the tests, stops
// the server and any started by [Shared], checks for leaked goroutines when
// the tests passed, and exits. With env nil it starts none: a package
// whose API server tests are few, or benchmarks, takes one from [Shared]
// when one of them runs.
func Main(m *testing.M, env **Env, crdPaths ...string) {
	if env != nil {
		*env = Start(crdPaths...)
	}
	code := m.Run()
	// A crash of etcd or kube-apiserver during the tests shows here, with
	// its last lines of output.
	var errs []error
	if env != nil {
		errs = append(errs, (*env).Stop())
	}
	shared.mu.Lock()
	for _, e := range shared.envs {
		errs = append(errs, e.Stop())
	}
	shared.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var shared struct {
	mu   sync.Mutex
	envs map[string]*Env
}

// Shared returns an API server with the CRD at crdPath (none for ""),
// started on first use and shared by the package's tests until [Main]
// stops it: for tests that need a CRD the package's own API server cannot
// also hold, or a package that starts no API server unless a test needs
// one.
func Shared(crdPath string) *Env {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if e, ok := shared.envs[crdPath]; ok {
		return e
	}
	if shared.envs == nil {
		shared.envs = map[string]*Env{}
	}
	var paths []string
	if crdPath != "" {
		paths = append(paths, crdPath)
	}
	e := Start(paths...)
	shared.envs[crdPath] = e
	return e
}
