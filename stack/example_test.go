package stack_test

import (
	"fmt"
	"io"
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
		fmt.Println(err)
		return
	}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: stack.New(10 * time.Second)(base)}

	resp, err := client.Get(srv.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK ok
}
