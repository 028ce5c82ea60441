package timeout_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

func ExampleNew() {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()

	base, _ := transport.New()
	client := &http.Client{Transport: timeout.New(100 * time.Millisecond)(base)}
	defer client.CloseIdleConnections()

	_, err := client.Get(slow.URL)
	var te *timeout.Error
	if errors.As(err, &te) {
		fmt.Println(te.Limit, te.Phase)
	}
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// 100ms waiting for response headers
	// true
}

// A longer timeout for one call that is known to be slow.
func ExampleContextWithTimeout() {
	ctx := timeout.ContextWithTimeout(context.Background(), 2*time.Minute)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://127.0.0.1:6443/apis/batch/v1/namespaces/ns/jobs", nil)
	_ = req // send it through a client built with timeout.New
}
