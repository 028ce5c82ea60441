package kubeadapter_test

import (
	"net/http"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// logLines keeps what its logger logs, a line each.
type logLines struct {
	mu sync.Mutex
	l  []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		l.l = append(l.l, args)
		l.mu.Unlock()
	}, funcr.Options{})
}

func (l *logLines) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.l)
}
