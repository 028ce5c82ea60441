package transporttest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// broken are middleware that each break one property of the contract, by
// the name TestSuiteCatches gives them.
var broken = map[string]func(http.RoundTripper) http.RoundTripper{
	"modifies the request": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			req.Header.Set("X-Added", "1") // on the caller's request, not a clone
			return next.RoundTrip(req)
		})
	},
	"leaves the body open": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			if req.Body != nil {
				// net/http closes the stand-in, never the caller's body.
				req = req.Clone(req.Context())
				req.Body = io.NopCloser(req.Body)
			}
			return next.RoundTrip(req)
		})
	},
	"answers with an error too": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err != nil {
				return &http.Response{StatusCode: http.StatusBadGateway, Body: http.NoBody}, err
			}
			return resp, nil
		})
	},
	"takes a status for an error": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil && resp.StatusCode >= 500 {
				_ = resp.Body.Close()
				return nil, fmt.Errorf("server error %d", resp.StatusCode)
			}
			return resp, err
		})
	},
	"takes an overload for an error": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
				_ = resp.Body.Close()
				return nil, fmt.Errorf("overloaded: %d", resp.StatusCode)
			}
			return resp, err
		})
	},
	"drops the answers it retries": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			for try := 1; try < 3 && err == nil && req.Method == http.MethodGet &&
				(resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500); try++ {
				// The answer retried is dropped without closing its body.
				resp, err = next.RoundTrip(req)
			}
			return resp, err
		})
	},
	"empties the pool on failure": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err != nil {
				// go-retryablehttp's pattern: every request in flight on
				// another goroutine loses its connection's reuse.
				if c, ok := next.(interface{ CloseIdleConnections() }); ok {
					c.CloseIdleConnections()
				}
			}
			return resp, err
		})
	},
	"hides the upgraded connection": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil {
				resp.Body = struct{ io.ReadCloser }{resp.Body} // read-only
			}
			return resp, err
		})
	},
	"buffers the body": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err != nil {
				return nil, err
			}
			// A watch's body never ends: reading it all before returning
			// hangs the caller.
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				return nil, err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b))
			return resp, nil
		})
	},
	"is no wrapper": func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(next.RoundTrip)
	},
	"closes idle connections twice": func(next http.RoundTripper) http.RoundTripper {
		return &twice{passThrough{next}}
	},
	"wraps itself": func(next http.RoundTripper) http.RoundTripper {
		return &cycle{passThrough{next}}
	},
	"ignores its context": func(next http.RoundTripper) http.RoundTripper {
		return wrap(next, func(req *http.Request) (*http.Response, error) {
			if req.URL.Query().Get("mode") == "cancel-header" {
				// Waits, as if for a lock a stuck request holds, without
				// looking at the request's context; the child process exits
				// with it still waiting.
				<-never
			}
			return next.RoundTrip(req)
		})
	},
	"panics on nil": func(next http.RoundTripper) http.RoundTripper {
		return passThrough{next} // no http.DefaultTransport in place of nil
	},
	"returns nil for nil": func(next http.RoundTripper) http.RoundTripper {
		if next == nil {
			return nil // and so panics on the caller's first request
		}
		return passThrough{next}
	},
	"fails with a plain error": func(http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Body != nil {
				_ = req.Body.Close()
			}
			return nil, errors.New("refusing: WithX must be positive, got 0")
		})
	},
}

func wrap(next http.RoundTripper, rt roundTripFunc) http.RoundTripper {
	return &wrapped{passThrough{next}, rt}
}

type wrapped struct {
	passThrough
	rt roundTripFunc
}

func (w *wrapped) RoundTrip(req *http.Request) (*http.Response, error) { return w.rt(req) }

// never is never closed.
var never = make(chan struct{})

// cycle's WrappedRoundTripper returns itself: a walk down the chain never
// reaches the base.
type cycle struct{ passThrough }

func (c *cycle) WrappedRoundTripper() http.RoundTripper { return c }

type twice struct{ passThrough }

func (t *twice) CloseIdleConnections() {
	t.passThrough.CloseIdleConnections()
	t.passThrough.CloseIdleConnections()
}

// TestSuiteCatches runs the suite over each broken middleware in a child
// process (the failures it must report would fail this test) and checks
// that the property it breaks fails, saying why.
func TestSuiteCatches(t *testing.T) {
	tests := []struct {
		give string // the broken middleware
		run  string // the subtest that must fail
		want string // in its failure
	}{
		{"modifies the request", "RequestNotModified", "headers changed"},
		{"leaves the body open", "BodyClosedOnError", "request body not closed"},
		{"answers with an error too", "BodyClosedOnError", "a response (502) came with the error"},
		{"takes a status for an error", "StatusIsNotError", "RoundTrip: server error 500"},
		{"takes an overload for an error", "StatusIsNotError", "RoundTrip: overloaded: 429"},
		{"hides the upgraded connection", "Upgrade", "not an io.ReadWriteCloser"},
		{"buffers the body", "Concurrent", "requests still running after"},
		{"drops the answers it retries", "Concurrent", "response bodies from the pool are not closed"},
		{"empties the pool on failure", "Concurrent", "emptied the pool itself"},
		{"is no wrapper", "Wrapper", "does not implement WrappedRoundTripper"},
		{"closes idle connections twice", "Wrapper", "each must reach it once"},
		{"wraps itself", "Wrapper", "WrappedRoundTripper calls below *transporttest_test.cycle: a cycle"},
		{"ignores its context", "Concurrent", "still running 1s after they were cancelled: the middleware ignores their context"},
		{"panics on nil", "NilNext", "panicked applied to nil, on its first request"},
		{"returns nil for nil", "NilNext", "returned nil, but is not the identity"},
		{"fails with a plain error", "ConfigError", "not a *transport.ConfigError"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBroken$/^"+tt.run+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), transporttest.BrokenEnv+"="+tt.give)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed %s (%v):\n%s", tt.give, err, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestBroken/"+tt.run) {
				t.Errorf("%s did not fail:\n%s", tt.run, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("the failure does not say %q:\n%s", tt.want, out)
			}
		})
	}
}

// TestBroken is the child of TestSuiteCatches; alone, it skips.
func TestBroken(t *testing.T) {
	name := os.Getenv(transporttest.BrokenEnv)
	if name == "" {
		t.Skip("run by TestSuiteCatches")
	}
	mw := broken[name]
	if mw == nil {
		t.Fatalf("no broken middleware %q", name)
	}
	transporttest.TestMiddleware(t, mw)
	t.Run("ConfigError", func(t *testing.T) {
		transporttest.TestConfigError(t, context.Background(), mw, "refusing: WithX must be positive, got 0")
	})
}
