package tracing_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/tracing"
	"github.com/kubewire/kubewire/transport"
)

// A plain net/http client with kubewire's stack, traced. Under client-go,
// pass the same options to kubeadapter.Apply:
//
//	kubeadapter.Apply(cfg, kubeadapter.WithStackOptions(t.StackOptions()...))
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("server got a trace context:", r.Header.Get("Traceparent") != "")
	}))
	defer srv.Close()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	t, err := tracing.New(tp)
	if err != nil {
		log.Fatal(err)
	}
	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: stack.New(10*time.Second, t.StackOptions()...)(base)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()

	for _, s := range rec.Ended() {
		fmt.Println(s.Name(), s.SpanKind())
	}
	// Output:
	// server got a trace context: true
	// GET client
	// GET internal
}
