package kubetest

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var sandboxes = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}

// Controller stands in for the agent-sandbox controller: it sets the status
// conditions a real one would set for the sandbox's intent (Ready, or
// Suspended), for the current generation.
func Controller(t testing.TB, cfg *rest.Config, ns, name string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u, err := dyn.Resource(sandboxes).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mode, _, _ := unstructured.NestedString(u.Object, "spec", "operatingMode")
	gen := u.GetGeneration()
	now := time.Now().UTC().Format(time.RFC3339)
	cond := func(typ, status, reason string) any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "observedGeneration": gen, "lastTransitionTime": now, "message": ""}
	}
	conds := []any{cond("Ready", "True", "Ready")}
	if mode == "Suspended" {
		conds = []any{cond("Ready", "False", "SandboxSuspended"), cond("Suspended", "True", "Suspended")}
	}
	u.Object["status"] = map[string]any{"conditions": conds}
	if _, err := dyn.Resource(sandboxes).Namespace(ns).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
