package transporttest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kubewire/kubewire/stack"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// userAgent is a middleware a user might write: it sets a User-Agent on
// requests that have none.
func userAgent(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &userAgentRT{next: next}
}

type userAgentRT struct{ next http.RoundTripper }

func (u *userAgentRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("User-Agent") == "" {
		// The caller's request is theirs: change a clone.
		req = req.Clone(req.Context())
		req.Header.Set("User-Agent", "example/1.0")
	}
	return u.next.RoundTrip(req)
}

func (u *userAgentRT) WrappedRoundTripper() http.RoundTripper { return u.next }

func (u *userAgentRT) CloseIdleConnections() {
	if c, ok := u.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// TestUserAgentContract is how a middleware's tests use the suite: one
// call, in a test of the middleware's package.
func TestUserAgentContract(t *testing.T) {
	transporttest.TestMiddleware(t, userAgent)
}

// TestUserAgentInStack checks it in its place in kubewire's stack too,
// where it sees every attempt retry makes.
func TestUserAgentInStack(t *testing.T) {
	transporttest.TestMiddleware(t, stack.New(30*time.Second, stack.WithAttemptMiddleware(userAgent)))
}

// TestUserAgentEachProtocol tests the middleware's own behaviour over
// both protocols, on the servers the suite uses.
func TestUserAgentEachProtocol(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.UserAgent())
	})
	for _, srv := range transporttest.NewServers(t, h).All() {
		t.Run(srv.Name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := userAgent(srv.Base).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.ProtoMajor != srv.ProtoMajor || string(b) != "example/1.0" {
				t.Errorf("HTTP/%d, the server saw %q; want HTTP/%d and %q", resp.ProtoMajor, b, srv.ProtoMajor, "example/1.0")
			}
		})
	}
}

// The suite runs in a test, as TestUserAgentContract above shows:
//
//	func TestUserAgentContract(t *testing.T) {
//		transporttest.TestMiddleware(t, userAgent)
//	}
//
// Beside it, the middleware's own behaviour is tested as any other.
func ExampleTestMiddleware() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.UserAgent())
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := userAgent(base).RoundTrip(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("the server saw %q; the caller's request has %q\n", b, req.UserAgent())
	// Output:
	// the server saw "example/1.0"; the caller's request has ""
}
