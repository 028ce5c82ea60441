// Package sandboxtest is the agent-sandbox half of the test rig: the
// project's own Sandbox CRD and controller, of the release the build
// selects, in process against a kubetest API server. hack/matrix.sh
// runs the driver's suites at each agent-sandbox release they support.
package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/agent-sandbox/controllers"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// SandboxModule is the Go module of the agent-sandbox project.
const SandboxModule = "sigs.k8s.io/agent-sandbox"

// SandboxCRD returns the path of the Sandbox CRD shipped in the
// agent-sandbox module that go.mod requires, as `go list -m` finds it in
// the module cache. The driver tests install it unchanged.
func SandboxCRD() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", SandboxModule).Output()
	if err != nil {
		return "", fmt.Errorf("locating %s with go list -m: %w", SandboxModule, err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "k8s", "crds", "agents.x-k8s.io_sandboxes.yaml")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("the Sandbox CRD of %s: %w", SandboxModule, err)
	}
	return path, nil
}

// RunController runs agent-sandbox's own SandboxReconciler, of the release
// go.mod requires, in this process against cfg's API server until the
// test ends. It watches namespace ns only, so that tests sharing an API
// server do not share a controller's work.
func RunController(t testing.TB, cfg *rest.Config, ns string) {
	t.Helper()
	mgr, err := ctrl.NewManager(rest.CopyConfig(cfg), ctrl.Options{
		Scheme:                 controllers.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 logr.Discard(),
		// One namespace by field selector, not DefaultNamespaces: with
		// DefaultNamespaces controller-runtime (v0.25.2, which the
		// workspace selects) builds its
		// multi-namespace cache, whose informers and handler
		// registrations each start a goroutine that waits for every
		// namespace to sync and never ends if the manager stops first
		// (client-go's HasSyncedChecker().Done() is then never closed).
		// goleak caught one when a test stopped the controller before it
		// synced. The selector would also hide cluster-scoped objects;
		// agent-sandbox's controller reads none.
		Cache: crcache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)},
		// Each test runs its own manager in this process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("agent-sandbox controller: %v", err)
	}
	r := &controllers.SandboxReconciler{
		Client:        mgr.GetClient(),
		Scheme:        mgr.GetScheme(),
		Recorder:      mgr.GetEventRecorder("sandbox-controller"),
		Tracer:        noTracing{},
		ClusterDomain: "cluster.local",
	}
	if err := r.SetupWithManager(mgr, 2); err != nil {
		t.Fatalf("agent-sandbox controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent-sandbox controller: %v", err)
		}
	})
}

// noTracing is the controller's Tracer that records nothing; the
// interface lives in an internal package of agent-sandbox.
type noTracing struct{}

func (noTracing) StartSpan(ctx context.Context, _ metav1.Object, _ string, _ map[string]string) (context.Context, func()) {
	return ctx, func() {}
}
func (noTracing) GetTraceContext(context.Context) string              { return "" }
func (noTracing) AddEvent(context.Context, string, map[string]string) {}
func (noTracing) IsRecording(context.Context) bool                    { return false }
