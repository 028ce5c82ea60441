package transporttest_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// rig is a server that counts the requests it executed, behind a proxy,
// with a client of its own whose faults are recorded.
type rig struct {
	proxy    *transporttest.Proxy
	url      string
	client   *http.Client
	executed atomic.Int32

	mu    sync.Mutex
	fired []transporttest.Fault
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.executed.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	p, err := transporttest.NewProxy(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.SetObserver(func(f transporttest.Fault) {
		r.mu.Lock()
		r.fired = append(r.fired, f)
		r.mu.Unlock()
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r.proxy, r.url, r.client = p, "http://"+p.Addr(), &http.Client{Transport: tr}
	return r
}

// post sends a POST, which net/http never re-sends once written.
func (r *rig) post(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader("x"))
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

func (r *rig) observed() []transporttest.Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transporttest.Fault(nil), r.fired...)
}

func TestAddrIsLoopback(t *testing.T) {
	r := newRig(t)
	assert.True(t, strings.HasPrefix(r.proxy.Addr(), "127.0.0.1:"), r.proxy.Addr())
}

// TestFaultOnReuse: each fault, armed for the connections open now, acts
// on the next request of a kept-alive connection, and the server executes
// that request or not as the fault says.
func TestFaultOnReuse(t *testing.T) {
	tests := []struct {
		give         transporttest.Fault
		wantExecuted int32
	}{
		{transporttest.ResetBeforeForward, 1},
		{transporttest.ResetAfterResponse, 2},
		{transporttest.CloseOnSend, 1},
	}
	for _, tt := range tests {
		t.Run(tt.give.String(), func(t *testing.T) {
			r := newRig(t)
			require.NoError(t, r.post(context.Background()))
			r.proxy.SetFaultExistingOnce(tt.give)
			err := r.post(context.Background())
			require.Error(t, err)
			assert.Equal(t, tt.wantExecuted, r.executed.Load())
			assert.Equal(t, []transporttest.Fault{tt.give}, r.observed())
			require.NoError(t, r.post(context.Background()), "the fault fired once and cleared")
			assert.Equal(t, 2, r.proxy.Accepted())
		})
	}
}

// TestBlackHole: a connection the fault reaches delivers nothing more in
// either direction and stays open until the client gives up; a connection
// opened after the fault is cleared works.
func TestBlackHole(t *testing.T) {
	r := newRig(t)
	require.NoError(t, r.post(context.Background()))
	r.proxy.SetFaultExisting(transporttest.BlackHole)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := r.post(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a black hole answers nothing and closes nothing")
	assert.Equal(t, int32(1), r.executed.Load(), "the request never reached the server")
	// The proxy's goroutine reports the fault; on a loaded machine it may
	// not have run yet when the client gives up.
	assert.Eventually(t, func() bool { return slices.Equal([]transporttest.Fault{transporttest.BlackHole}, r.observed()) }, 10*time.Second, 5*time.Millisecond, "observed %v", r.observed())

	r.proxy.SetFault(transporttest.NoFault)
	require.NoError(t, r.post(context.Background()))
	assert.Equal(t, int32(2), r.executed.Load())
	assert.Equal(t, 2, r.proxy.Accepted(), "the client gave up on the dead connection and dialed a new one")
}

// TestBlackHoleStaysDead: clearing the fault does not revive a connection
// it reached; the bytes sent on it afterwards never reach the server.
func TestBlackHoleStaysDead(t *testing.T) {
	r := newRig(t)
	conn, err := net.Dial("tcp", r.proxy.Addr())
	require.NoError(t, err)
	defer conn.Close()
	br := bufio.NewReader(conn)
	// wait is how long to wait for an answer: long for the healthy
	// connection, short where none may come.
	send := func(wait time.Duration) error {
		_, err := io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	require.NoError(t, send(30*time.Second))
	r.proxy.SetFaultExisting(transporttest.BlackHole)
	require.ErrorIs(t, send(200*time.Millisecond), os.ErrDeadlineExceeded)
	r.proxy.SetFault(transporttest.NoFault)
	require.ErrorIs(t, send(200*time.Millisecond), os.ErrDeadlineExceeded, "still dead after the fault cleared")
	assert.Equal(t, int32(1), r.executed.Load())
	assert.Equal(t, []transporttest.Fault{transporttest.BlackHole}, r.observed(), "reported once per connection")
}

// TestIdleDrop: a request sent on a connection idle past the drop time is
// reset and reported; one sent sooner passes.
func TestIdleDrop(t *testing.T) {
	r := newRig(t)
	r.proxy.SetIdleDrop(time.Second)
	require.NoError(t, r.post(context.Background()))
	require.NoError(t, r.post(context.Background()), "not idle long enough")
	time.Sleep(1500 * time.Millisecond) // the idle time is what is tested
	err := r.post(context.Background())
	require.Error(t, err)
	var reset bool
	for e := err; e != nil; e = errors.Unwrap(e) {
		reset = reset || strings.Contains(e.Error(), "connection reset")
	}
	assert.True(t, reset, "%v", err)
	assert.Equal(t, []transporttest.Fault{transporttest.IdleDrop}, r.observed())
	assert.Equal(t, int32(2), r.executed.Load())
}

// TestStall: the server's answer waits until the fault is cleared, then
// arrives whole.
func TestStall(t *testing.T) {
	r := newRig(t)
	r.proxy.SetFault(transporttest.Stall)
	done := make(chan error, 1)
	go func() { done <- r.post(context.Background()) }()
	require.Eventually(t, func() bool { return len(r.observed()) == 1 }, 10*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("answered during the stall: %v", err)
	default:
	}
	assert.Equal(t, int32(1), r.executed.Load(), "the request was forwarded")
	r.proxy.SetFault(transporttest.NoFault)
	require.NoError(t, <-done)
	assert.Equal(t, []transporttest.Fault{transporttest.Stall}, r.observed())
}

// TestFaultOnceHolds: a fault that holds, set once, holds the first
// connection it fires on until it is replaced, and no other: the next
// connection is answered at once.
func TestFaultOnceHolds(t *testing.T) {
	for _, f := range []transporttest.Fault{transporttest.Stall, transporttest.Hold} {
		t.Run(f.String(), func(t *testing.T) {
			r := newRig(t)
			r.proxy.SetFaultOnce(f)
			held := make(chan error, 1)
			go func() { held <- r.post(context.Background()) }()
			require.Eventually(t, func() bool { return len(r.observed()) == 1 }, 10*time.Second, 5*time.Millisecond)

			// The held connection is busy, so this request opens another.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, r.post(ctx), "a second connection, after the fault fired once")
			assert.Equal(t, 2, r.proxy.Accepted())
			select {
			case err := <-held:
				t.Fatalf("the first connection was let go before the fault was replaced: %v", err)
			default:
			}
			r.proxy.SetFault(transporttest.NoFault)
			require.NoError(t, <-held)
			assert.Equal(t, []transporttest.Fault{f}, r.observed())
		})
	}
}

// TestFaultOnceFiresOnce: connections that meet a fault set once at the
// same time; it fires on one of them.
func TestFaultOnceFiresOnce(t *testing.T) {
	for _, f := range []transporttest.Fault{transporttest.ResetBeforeForward, transporttest.CloseOnSend, transporttest.ResetAfterResponse} {
		t.Run(f.String(), func(t *testing.T) {
			r := newRig(t)
			r.proxy.SetFaultOnce(f)
			const n = 16
			var wg sync.WaitGroup
			var failed atomic.Int32
			start := make(chan struct{})
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if r.post(context.Background()) != nil {
						failed.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			assert.Equal(t, []transporttest.Fault{f}, r.observed())
			assert.Equal(t, int32(1), failed.Load(), "requests that met the fault")
		})
	}
}

func TestFaultString(t *testing.T) {
	assert.Equal(t, "black-hole", transporttest.BlackHole.String())
	assert.Equal(t, "Fault(99)", transporttest.Fault(99).String())
}

// TestSetFaultRejectsObservations: IdleDrop, or a value past the last
// fault, would otherwise set nothing, and the test would pass without its
// fault.
func TestSetFaultRejectsObservations(t *testing.T) {
	r := newRig(t)
	sets := map[string]func(transporttest.Fault){
		"SetFault":             r.proxy.SetFault,
		"SetFaultOnce":         r.proxy.SetFaultOnce,
		"SetFaultExisting":     r.proxy.SetFaultExisting,
		"SetFaultExistingOnce": r.proxy.SetFaultExistingOnce,
	}
	for name, set := range sets {
		for _, f := range []transporttest.Fault{transporttest.IdleDrop, transporttest.Fault(99), transporttest.Fault(-1)} {
			assert.PanicsWithValue(t, "transporttest: "+f.String()+" is not a fault to set (an idle drop is set with SetIdleDrop)",
				func() { set(f) }, "%s(%v)", name, f)
		}
	}
	require.NoError(t, r.post(context.Background()), "no fault set")
}
