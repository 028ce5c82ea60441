package bench_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/metrics"
)

// docs/metrics.md's sample: one Metrics observing a client-go config
// and a plain http.Client. It lives here because no published module
// imports both kubeadapter and metrics, and this one reaches no user.
func Example_metrics() {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	base := srv.Client().Transport
	registry := prometheus.NewRegistry()

	m := metrics.New()
	registry.MustRegister(m)
	if err := kubeadapter.Apply(cfg, kubeadapter.WithObserver(m)); err != nil { // client-go
		log.Fatal(err)
	}
	rt := m.Stack(10 * time.Second)(base) // plain net/http

	kc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer kc.CloseIdleConnections()
	for _, c := range []*http.Client{kc, {Transport: rt}} {
		resp, err := c.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		_ = resp.Body.Close()
	}

	families, err := registry.Gather()
	if err != nil {
		log.Fatal(err)
	}
	var attempts float64
	for _, f := range families {
		if f.GetName() == "kubewire_http_attempts_total" {
			for _, s := range f.GetMetric() {
				attempts += s.GetCounter().GetValue()
			}
		}
	}
	fmt.Println("attempts counted:", attempts)
	// Output: attempts counted: 2
}
