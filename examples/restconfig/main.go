// Command restconfig shows kubewire adopted by an existing client-go
// program: one call between loading the config and building clients.
//
//	go run ./examples/restconfig -kubeconfig ~/.kube/config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubewire/kubewire/kubeadapter"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("restconfig", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	verbose := fs.Bool("v", false, "log every request attempt with its connection facts")
	if err := fs.Parse(args); err != nil {
		return 2
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "restconfig: loading kubeconfig: %v\n", err)
		return 1
	}

	level := slog.LevelInfo
	if *verbose {
		level = -10 // logr verbosity 4 and above
	}
	log := logr.FromSlogHandler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The one call: per-request deadlines, connection facts in logs and
	// errors, safe retries of transport errors.
	if err := kubeadapter.Apply(cfg, kubeadapter.WithTimeout(*timeout), kubeadapter.WithLogger(log)); err != nil {
		fmt.Fprintf(stderr, "restconfig: %v\n", err)
		return 2
	}

	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "restconfig: %v\n", err)
		return 1
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		fmt.Fprintf(stderr, "restconfig: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "server %s\n", v.GitVersion)
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(stderr, "restconfig: the API server did not answer within %v: %v\n", *timeout, err)
			return 1
		}
		fmt.Fprintf(stderr, "restconfig: %v\n", err)
		return 1
	}
	for _, ns := range nss.Items {
		fmt.Fprintf(stdout, "namespace %s\n", ns.Name)
	}
	return 0
}
