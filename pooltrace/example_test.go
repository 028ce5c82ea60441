package pooltrace_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/transport"
)

// Feed connection reuse into metrics with an observer.
func ExampleWithObserver() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()

	reused := map[bool]int{}
	base, _ := transport.New()
	client := &http.Client{Transport: pooltrace.New(pooltrace.WithObserver(func(a pooltrace.Attempt) {
		reused[a.Conn.Reused]++
	}))(base)}
	defer client.CloseIdleConnections()

	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
	}
	fmt.Printf("new %d, reused %d\n", reused[false], reused[true])
	// Output: new 1, reused 2
}
