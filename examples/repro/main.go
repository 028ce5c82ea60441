// Command repro reproduces, on loopback and without a cluster, the failure
// of a read timeout that lives on a pooled connection, and shows kubewire's
// per-request timeout fixing it.
//
// A local server answers every request in 300ms. Client A gives its
// connections a 2s read timeout the common Go way (a dialer whose conn sets
// a read deadline at the start of each Read). Client B uses the kubewire
// stack with a 2s timeout per request. For each idle gap, each client sends a
// request, leaves its connection idle for the gap, then sends a GET or a
// PATCH. The table shows the outcome and how many times the server executed
// each request. The exit status is 0 when the table came out as the field
// report predicts, 1 otherwise.
//
//	go run ./examples/repro
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
)

func main() {
	timeout := flag.Duration("timeout", 2*time.Second, "client A's read timeout and client B's request timeout")
	latency := flag.Duration("latency", 300*time.Millisecond, "server latency")
	flag.Parse()
	if *timeout <= 0 || *latency <= 0 || *latency >= *timeout {
		fmt.Fprintf(os.Stderr, "repro: need 0 < -latency < -timeout, got -latency=%v -timeout=%v\n", *latency, *timeout)
		os.Exit(2)
	}
	os.Exit(run(os.Stdout, *timeout, *latency))
}

func run(w io.Writer, timeout, latency time.Duration) int {
	// Gaps stay 100ms or more away from the point where the time left
	// after the gap equals the latency, so scheduling noise cannot flip them.
	edge := timeout - latency
	gaps := []time.Duration{0, timeout / 4, timeout / 2, edge - 300*time.Millisecond, edge + 100*time.Millisecond, edge + 200*time.Millisecond}
	fmt.Fprintf(w, "server latency %v; client A: %v read timeout on the connection; client B: kubewire, %v timeout per request\n", latency, timeout, timeout)
	fmt.Fprintf(w, "(xN: times the server executed the request)\n")
	ok := true
	var examples []string
	for _, h2 := range []bool{false, true} {
		cfg := Config{Timeout: timeout, Latency: latency, HTTP2: h2, Log: logr.Discard()}
		for _, g := range gaps {
			if g >= 0 && g < timeout {
				cfg.Gaps = append(cfg.Gaps, g)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		results, err := Sweep(ctx, cfg)
		cancel()
		if err != nil {
			fmt.Fprintf(w, "repro: %v\n", err)
			return 1
		}
		proto := "HTTP/1.1"
		if h2 {
			proto = "HTTP/2"
		}
		fmt.Fprintf(w, "\n%s\n", proto)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "idle gap\tA GET\tA PATCH\tB GET\tB PATCH\t")
		for i := 0; i < len(results); i += 4 {
			fmt.Fprintf(tw, "%v\t", results[i].Gap)
			// results are ordered GET A, GET B, PATCH A, PATCH B.
			for _, j := range []int{0, 2, 1, 3} {
				r := results[i+j]
				cell := fmt.Sprintf("%s x%d", r.Outcome(), r.Executions)
				if err := Expect(cfg, r); err != nil {
					ok = false
					cell += " (unexpected)"
					examples = append(examples, err.Error())
				}
				fmt.Fprintf(tw, "%s\t", cell)
				if r.Err != nil && len(examples) < 4 {
					examples = append(examples, fmt.Sprintf("%s client %s %s at gap %v: %v", proto, r.Client, r.Method, r.Gap, r.Err))
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	for _, e := range examples {
		fmt.Fprintln(w, e)
	}
	if !ok {
		fmt.Fprintln(w, "\nthe table did not come out as the field report predicts")
		return 1
	}
	fmt.Fprintf(w, "\nas predicted: client A fails once the idle gap leaves less than %v of its read timeout", latency)
	fmt.Fprintf(w, " (over HTTP/1.1 net/http silently re-sends the GET, so the server runs it twice);\nclient B, with the deadline on the request, succeeds at every gap and every request runs once.\n")
	return 0
}
