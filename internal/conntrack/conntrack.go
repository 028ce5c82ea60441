// Package conntrack tells a test when a client closes a connection it
// dialed: the contract suite in transport/transporttest and the root
// module's own tests share it. It imports the standard library only, so
// that transporttest brings its users nothing more.
package conntrack

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// DialFunc is the type of http.Transport.DialContext and rest.Config.Dial.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Conns tells a test when the client closes a connection it dialed, so a
// test can wait for a health check to give up on a connection instead of
// sleeping for as long as it should take. The zero value is ready to use.
type Conns struct {
	mu     sync.Mutex
	dialed int
	closed map[int]chan struct{}
}

// Dial wraps dial; the connections it opens are numbered from 0.
func (c *Conns) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		ch := c.chanLocked(c.dialed)
		c.dialed++
		c.mu.Unlock()
		return &watchedConn{Conn: nc, closed: ch}, nil
	}
}

// Closed returns a channel that is closed when the client closes its i-th
// connection.
func (c *Conns) Closed(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chanLocked(i)
}

// CheckHealthClose checks, while the peer holds every byte, whether the
// HTTP/2 health check closes the i-th connection: when closes is true it
// must within 10 seconds (a check due after 100ms fails 100ms later); when
// false it must still be open after 600ms, past when such a check would
// have closed it.
func (c *Conns) CheckHealthClose(t testing.TB, i int, closes bool) {
	t.Helper()
	if !closes {
		select {
		case <-c.Closed(i):
			t.Fatal("the connection was closed with no health check due")
		case <-time.After(600 * time.Millisecond):
		}
		return
	}
	select {
	case <-c.Closed(i):
	case <-time.After(10 * time.Second):
		t.Fatal("the health check did not close the connection (PING after 100ms, no answer 100ms later)")
	}
}

// Dialed reports how many connections were dialed.
func (c *Conns) Dialed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialed
}

func (c *Conns) chanLocked(i int) chan struct{} {
	if c.closed == nil {
		c.closed = map[int]chan struct{}{}
	}
	ch, ok := c.closed[i]
	if !ok {
		ch = make(chan struct{})
		c.closed[i] = ch
	}
	return ch
}

type watchedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (w *watchedConn) Close() error {
	err := w.Conn.Close()
	w.once.Do(func() { close(w.closed) })
	return err
}
