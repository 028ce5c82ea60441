package retry_test

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/transport"
)

// A GET whose connection is reset under it is sent again on a new one.
func ExampleNew() {
	var attempts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if attempts.Add(1) == 1 { // reset the first connection after reading the request
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				log.Fatal(err)
			}
			conn.(*net.TCPConn).SetLinger(0) // close with a TCP RST
			conn.Close()
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: retry.New(retry.WithObserver(func(d retry.Decision) {
		fmt.Printf("attempt %d failed (%s), retry: %t\n", d.Attempt, d.Class, d.Retry)
	}))(base)}
	defer client.CloseIdleConnections()

	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", attempts.Load(), "attempts")
	// Output:
	// attempt 1 failed (maybe sent), retry: true
	// 200 after 2 attempts
}

// With WithStatusRetry, a 503 is retried, after the Retry-After the
// server asks for; without it, the 503 goes back to the caller.
func ExampleWithStatusRetry() {
	var served atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !served.Swap(true) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "starting up", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()

	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	defer base.CloseIdleConnections()
	rt := retry.New(retry.WithStatusRetry(), retry.WithObserver(func(d retry.Decision) {
		fmt.Printf("attempt %d: %d, retry: %t\n", d.Attempt, d.StatusCode, d.Retry)
	}))(base)

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
	// Output:
	// attempt 1: 503, retry: true
	// 200 OK
}

// A request that fails on every attempt returns a *Error that keeps each
// attempt's cause. A refused connection never reached the server, so
// even a POST is sent again.
func ExampleError() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	base, err := transport.New()
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: retry.New(
		retry.WithBackoff(func(int) time.Duration { return time.Millisecond }),
	)(base)}

	_, err = client.Post(url, "application/json", strings.NewReader(`{"kind":"Order"}`))
	var re *retry.Error
	if !errors.As(err, &re) {
		log.Fatalf("want a *retry.Error, got %v", err)
	}
	fmt.Println(re.Method, re.Class, "after", re.Attempts, "attempts:", re.Reason)
	fmt.Println(len(re.Causes), errors.Is(err, syscall.ECONNREFUSED))
	// Output:
	// POST not sent after 3 attempts: attempts exhausted
	// 3 true
}
