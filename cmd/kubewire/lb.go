package main

import (
	"net"
	"sync"
	"time"
)

// idleDropListener imitates a load balancer or NAT in front of the probe's
// local server that forgets a flow idle for longer than idle: when the
// client sends on a connection that carried nothing for longer, the
// connection is reset instead of read. That is what a client sees when its
// pooled connection outlived the load balancer's idle timeout.
type idleDropListener struct {
	net.Listener
	idle time.Duration
}

func (l idleDropListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &idleDropConn{Conn: c, idle: l.idle, last: time.Now()}, nil
}

// idleDropConn is one flow. The server's reads block while the flow is
// idle, so the idle time is measured between the bytes that moved, not
// from when a read started.
type idleDropConn struct {
	net.Conn
	idle time.Duration

	mu   sync.Mutex
	last time.Time
}

func (c *idleDropConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		now := time.Now()
		c.mu.Lock()
		idle := now.Sub(c.last)
		c.last = now
		c.mu.Unlock()
		if c.idle > 0 && idle > c.idle {
			reset(c.Conn)
			return 0, net.ErrClosed
		}
	}
	return n, err
}

func (c *idleDropConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.last = time.Now()
	c.mu.Unlock()
	return n, err
}

// reset closes c with an RST (SO_LINGER 0), as a load balancer that lost
// the flow answers.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
