// Command kubewire helps diagnose Kubernetes API clients on pooled
// connections.
//
//	kubewire probe [flags]   measure connection reuse and idle failures
//
// Run `kubewire probe -h` for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// The first Ctrl-C cancels ctx and the command exits 130; from then on
	// SIGINT kills the process as it does by default.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: kubewire <command> [flags]

commands:
  probe   send read-only requests at a sweep of idle gaps, through a stock
          client-go config and through kubewire, and show what happened to
          each pooled connection
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "probe":
		return probe(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kubewire: unknown command %q\n%s", args[0], usage)
	return 2
}
