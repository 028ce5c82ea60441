package transport_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
	"github.com/kubewire/kubewire/transport"
)

// A pooled base transport under the kubewire stack: retry outermost, then
// pooltrace, then the per-request deadline.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer srv.Close()

	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport.Chain(
		retry.New(),                 // outermost: one retry loop per call
		pooltrace.New(),             // one trace per attempt
		timeout.New(10*time.Second), // one deadline per attempt
	)(base)}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, string(b))
	// Output: 200 hello
}

// A base transport with options: each is checked here, and an invalid
// one is an error naming it and its value.
func ExampleNew() {
	base, err := transport.New(transport.WithIdleConnTimeout(30 * time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer base.CloseIdleConnections()
	fmt.Println(base.IdleConnTimeout)
	// Output: 30s
}

func ExampleNew_invalid() {
	_, err := transport.New(transport.WithHTTP2PingTimeout(0))
	fmt.Println(err)
	// Output: transport: WithHTTP2PingTimeout must be positive, got 0s
}
