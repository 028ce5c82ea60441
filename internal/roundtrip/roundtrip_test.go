package roundtrip_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// closer is a request body that reports its Close.
type closer struct{ closed func() }

func (closer) Read([]byte) (int, error) { return 0, io.EOF }
func (c closer) Close() error           { c.closed(); return nil }

func TestCloseRequestBody(t *testing.T) {
	roundtrip.CloseRequestBody(nil)
	closed := false
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", closer{func() { closed = true }})
	require.NoError(t, err)
	roundtrip.CloseRequestBody(req)
	assert.True(t, closed)
}

// onlyWrapped exposes what it wraps but has no CloseIdleConnections, as
// client-go's own wrappers and its v0.36+ tracked transport do.
type onlyWrapped struct{ next http.RoundTripper }

func (w onlyWrapped) RoundTrip(req *http.Request) (*http.Response, error) {
	return w.next.RoundTrip(req)
}
func (w onlyWrapped) WrappedRoundTripper() http.RoundTripper { return w.next }

// TestCloseIdleConnectionsWalksWrappers: the call reaches the pool through
// wrappers that only expose WrappedRoundTripper, and closes the idle
// connection the server sees.
func TestCloseIdleConnectionsWalksWrappers(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	rt := onlyWrapped{onlyWrapped{base}}
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())

	roundtrip.CloseIdleConnections(rt)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle connection is still open: CloseIdleConnections stopped at a wrapper")
	}
}

// TestKeyOf: a key names one net.Conn, whatever its addresses: two pipes
// (or unix-socket connections) share theirs.
func TestKeyOf(t *testing.T) {
	a1, a2 := net.Pipe()
	defer a1.Close()
	defer a2.Close()
	b1, b2 := net.Pipe()
	defer b1.Close()
	defer b2.Close()
	ka, ok := roundtrip.KeyOf(a1)
	require.True(t, ok)
	again, _ := roundtrip.KeyOf(a1)
	kb, _ := roundtrip.KeyOf(b1)
	assert.Equal(t, ka, again, "one connection, one key")
	assert.Equal(t, a1.LocalAddr(), b1.LocalAddr(), "the pipes share their addresses")
	assert.NotEqual(t, ka, kb, "another connection is another key")
	_, ok = roundtrip.KeyOf(nil)
	assert.False(t, ok)
}
