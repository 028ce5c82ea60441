package reconciler_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/driver"
	"github.com/kubewire/kubewire/driver/reconciler"
)

// The controller of a gateway's sandboxes in one namespace, until SIGTERM.
func ExampleNew() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	d, err := driver.New(cfg, "gw", []string{"team-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	rec, err := reconciler.New(d, reconciler.WithPeriod(5*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	if err := rec.Run(ctx); ctx.Err() == nil { // Run returns when ctx is done, or on a failure
		log.Fatal(err)
	}
}
