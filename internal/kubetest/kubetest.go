// Package kubetest is the test rig of real parts: a kube-apiserver and etcd
// started by controller-runtime's envtest from the binaries in
// KUBEBUILDER_ASSETS, which `make test` builds from Go modules;
// agent-sandbox's own CRD and controllers (the go.mod release in process,
// v0.4.6 as a process); and a fake kubelet that runs the pods, since envtest
// has no nodes.
package kubetest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Env is a running API server.
type Env struct {
	env     *envtest.Environment
	cfg     *rest.Config
	err     error
	certDir string
}

// Options configure [StartWith].
type Options struct {
	// CRDPaths are installed once the API server runs.
	CRDPaths []string
	// APIServerArgs are kube-apiserver flags, by name without dashes, set
	// over envtest's defaults.
	APIServerArgs map[string]string
	// APIServerOutput receives kube-apiserver's output; nil discards it.
	APIServerOutput io.Writer
}

// Start starts the API server if KUBEBUILDER_ASSETS is set. Call it from
// TestMain and Stop it after m.Run. CRDs are installed from crdPaths.
func Start(crdPaths ...string) *Env {
	return StartWith(Options{CRDPaths: crdPaths})
}

// StartWith starts the API server as o says if KUBEBUILDER_ASSETS is set.
// Its certificates live in a directory of its own until Stop, so that
// [Env.RestartAPIServer] brings it back with the same ones.
func StartWith(o Options) *Env {
	e := &Env{}
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return e
	}
	e.env = &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     o.CRDPaths,
		ErrorIfCRDPathMissing: len(o.CRDPaths) > 0,
	}
	api := e.env.ControlPlane.GetAPIServer()
	if e.certDir, e.err = os.MkdirTemp("", "kubewire-apiserver-"); e.err != nil {
		return e
	}
	api.CertDir = e.certDir
	api.Out, api.Err = o.APIServerOutput, o.APIServerOutput
	for k, v := range o.APIServerArgs {
		api.Configure().Set(k, v)
	}
	e.cfg, e.err = e.env.Start()
	if e.err != nil {
		e.err = fmt.Errorf("starting kube-apiserver and etcd from KUBEBUILDER_ASSETS=%s: %w", dir, e.err)
	}
	return e
}

// Stop stops the API server.
func (e *Env) Stop() {
	if e.env != nil && e.cfg != nil {
		_ = e.env.Stop()
	}
	if e.certDir != "" {
		_ = os.RemoveAll(e.certDir)
	}
}

// RestartAPIServer stops kube-apiserver and starts it again on the same
// etcd, address and certificates, as an upgrade or a crash-and-restart
// does; clients keep their configs. It returns once the new process is
// healthy.
func (e *Env) RestartAPIServer() error {
	api := e.env.ControlPlane.APIServer
	before := api.SecureServing.Address + ":" + api.SecureServing.Port
	// A stop that times out has killed the process: start it all the same.
	var errs []error
	if err := api.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping kube-apiserver: %w", err))
	}
	if err := api.Start(); err != nil {
		return errors.Join(append(errs, fmt.Errorf("starting kube-apiserver again: %w", err))...)
	}
	if after := api.SecureServing.Address + ":" + api.SecureServing.Port; after != before {
		errs = append(errs, fmt.Errorf("kube-apiserver came back on %s, not %s", after, before))
	}
	return errors.Join(errs...)
}

// AddUser provisions a user of the API server (client certificate
// authentication) in groups and returns its config: a client whose
// requests the audit log tells apart.
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// Config returns a copy of the admin config of the API server (client
// certificate authentication). Without KUBEBUILDER_ASSETS the test is
// skipped with a note to run `make test`, which always sets it; if the API
// server could not start, the test fails.
func (e *Env) Config(t testing.TB) *rest.Config {
	t.Helper()
	if e.env == nil {
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
// the tests passed, and exits.
func Main(m *testing.M, env **Env, crdPaths ...string) {
	*env = Start(crdPaths...)
	code := m.Run()
	(*env).Stop()
	shared.mu.Lock()
	for _, e := range shared.envs {
		e.Stop()
	}
	shared.mu.Unlock()
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

// Shared returns an API server with the CRD at crdPath, started on first
// use and shared by the package's tests until [Main] stops it: for tests
// that need a CRD the package's own API server cannot also hold.
func Shared(crdPath string) *Env {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if e, ok := shared.envs[crdPath]; ok {
		return e
	}
	if shared.envs == nil {
		shared.envs = map[string]*Env{}
	}
	e := Start(crdPath)
	shared.envs[crdPath] = e
	return e
}
