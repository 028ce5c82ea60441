package metrics_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kubewire/kubewire/metrics"
	"github.com/kubewire/kubewire/transport"
)

// A plain http.Client with kubewire's stack, observed by the metrics.
// Under client-go, kubeadapter.Apply(cfg, kubeadapter.WithObserver(m))
// does the same.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()

	m := metrics.New()
	registry := prometheus.NewRegistry()
	registry.MustRegister(m)

	base, err := transport.New()
	if err != nil {
		panic(err)
	}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: m.Stack(10 * time.Second)(base)}
	for range 2 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		_ = resp.Body.Close()
	}
	n, err := testutil.GatherAndCount(registry, "kubewire_http_attempts_total")
	if err != nil {
		panic(err)
	}
	fmt.Println("series of kubewire_http_attempts_total:", n)
	// Output: series of kubewire_http_attempts_total: 2
}
