package transporttest_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// passThrough is the least a middleware can be: it hands every request to
// the RoundTripper it wraps. The suite must pass it, or it asks more of
// middleware than net/http itself gives.
type passThrough struct{ next http.RoundTripper }

func newPassThrough(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return passThrough{next}
}

func (p passThrough) RoundTrip(req *http.Request) (*http.Response, error) {
	return p.next.RoundTrip(req)
}

func (p passThrough) WrappedRoundTripper() http.RoundTripper { return p.next }

func (p passThrough) CloseIdleConnections() {
	if c, ok := p.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func TestTestMiddleware(t *testing.T) {
	transporttest.TestMiddleware(t, newPassThrough)
}

// TestIdentity: a middleware that returns what it is given, as
// transport.Chain() does, adds nothing to break.
func TestIdentity(t *testing.T) {
	t.Run("func", func(t *testing.T) {
		transporttest.TestMiddleware(t, func(next http.RoundTripper) http.RoundTripper { return next })
	})
	t.Run("Chain()", func(t *testing.T) { transporttest.TestMiddleware(t, transport.Chain()) })
}

// refusing is a middleware built with an invalid option: it fails every
// request unsent, with the body closed.
func refusing(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &transport.ConfigError{Err: errors.New("refusing: WithX must be positive, got 0")}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func TestTestConfigError(t *testing.T) {
	transporttest.TestConfigError(t, context.Background(), refusing, "refusing: WithX must be positive, got 0")
}
