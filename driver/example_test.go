package driver_test

import (
	"context"
	"fmt"
	"log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	sandboxfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"

	"github.com/kubewire/kubewire/driver"
)

// A driver on client-go's fake clientsets, as in a test: it creates a
// sandbox, the test plays agent-sandbox's controller and reports it
// ready, and the driver stops it. Against a cluster, build the driver
// with New from a rest.Config instead.
func ExampleNewForClients() {
	sandboxes := sandboxfake.NewSimpleClientset()
	// Discovery lists v1beta1 Sandboxes, as an API server with
	// agent-sandbox v0.5.0 or later does.
	sandboxes.Resources = []*metav1.APIResourceList{{
		GroupVersion: sandboxv1beta1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "sandboxes", Namespaced: true, Kind: "Sandbox"}},
	}}
	kube := kubefake.NewSimpleClientset() // the fence NetworkPolicies and the Events

	d, err := driver.NewForClients(sandboxes, kube, "gw", []string{"team-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	ctx := context.Background()
	agent := sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "agent", Image: "busybox"}},
	}}
	s, err := d.Create(ctx, "team-a", "sb", agent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Name, s.Phase)

	// The controller's part: the pod is up.
	o, err := sandboxes.AgentsV1beta1().Sandboxes("team-a").Get(ctx, "sb", metav1.GetOptions{})
	if err != nil {
		log.Fatal(err)
	}
	o.Status.Conditions = []metav1.Condition{{
		Type:               string(sandboxv1beta1.SandboxConditionReady),
		Status:             metav1.ConditionTrue,
		Reason:             sandboxv1beta1.SandboxReasonDependenciesReady,
		ObservedGeneration: o.Generation,
	}}
	if _, err := sandboxes.AgentsV1beta1().Sandboxes("team-a").UpdateStatus(ctx, o, metav1.UpdateOptions{}); err != nil {
		log.Fatal(err)
	}
	s, err = d.Get(ctx, "team-a", "sb")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Name, s.Phase)

	s, err = d.Stop(ctx, "team-a", "sb")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Name, s.Phase, "running:", s.Running)
	// Output:
	// sb Starting
	// sb Ready
	// sb Stopping running: false
}
