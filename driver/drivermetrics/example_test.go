package drivermetrics_test

import (
	"context"
	"log"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/drivermetrics"
	"github.com/kubewire/kubewire/driver/reconciler"
)

// The reconciler of a gateway, with its metrics on a registry of the
// gateway's own, served at /metrics.
func Example() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	d, err := driver.New(cfg, "gw", []string{"team-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()

	m := drivermetrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	rec, err := reconciler.New(d, reconciler.WithObserver(m), reconciler.WithQueueMetrics(m.Queue()))
	if err != nil {
		log.Fatal(err)
	}

	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	go func() { log.Fatal(http.ListenAndServe(":9090", nil)) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = rec.Run(ctx)
}
