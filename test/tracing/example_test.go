package tracing_test

import (
	"context"
	"log"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/homedir"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/tracing"
)

// Under client-go, tracing's stack options go through kubeadapter.Apply:
// every client built from cfg is traced. The example lives here, not in
// package tracing, whose module requires no client-go.
func Example_clientGo() {
	tp := sdktrace.NewTracerProvider() // with your exporter
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(homedir.HomeDir(), ".kube", "config"))
	if err != nil {
		log.Fatal(err)
	}

	t, err := tracing.New(tp)
	if err != nil {
		log.Fatal(err)
	}
	if err := kubeadapter.Apply(cfg, kubeadapter.WithStackOptions(t.StackOptions()...)); err != nil {
		log.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	_ = clientset
}
