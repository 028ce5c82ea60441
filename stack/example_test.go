package stack_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/transport"
)

// A plain net/http client with kubewire's stack over its pooled base
// transport.
func ExampleNew() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()

	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: stack.New(10 * time.Second)(base)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK ok
}
