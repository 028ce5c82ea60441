package kubetest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The load balancer in front of an HA control plane: a TCP proxy on
// loopback, as a cloud's network load balancer is: it sees no TLS, picks a
// replica for each new connection and never for a request, and learns
// that a replica is gone only from its health checks.

// balancerConfig are the health-check settings of a balancer, defaults
// filled in.
type balancerConfig struct {
	interval  time.Duration // between checks of one replica
	unhealthy int           // consecutive failed checks that mark a replica out
	healthy   int           // consecutive passed checks that mark it back in
}

// balancer forwards each connection accepted on ln to the next replica in
// round robin that its health checks have not marked out. Its methods are
// safe for concurrent use.
type balancer struct {
	ln       net.Listener
	cfg      balancerConfig
	check    *http.Client // no pooled connections: each check dials, as a cloud's does
	backends []*backend
	next     atomic.Uint64
	refused  atomic.Int64

	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // both ends of every forwarded connection
	closed bool
}

// backend is one replica as the balancer sees it.
type backend struct {
	addr         string
	in           atomic.Bool
	conns        atomic.Int64
	dialErrors   atomic.Int64
	checks       atomic.Int64
	checksFailed atomic.Int64
}

// newBalancer listens on a free loopback port; start begins forwarding.
func newBalancer(cfg balancerConfig, check *http.Client) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &balancer{ln: ln, cfg: cfg, check: check, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

// start forwards to the replicas at addrs, all of them in: the caller has
// seen each ready.
func (b *balancer) start(addrs []string) {
	for _, a := range addrs {
		be := &backend{addr: a}
		be.in.Store(true)
		b.backends = append(b.backends, be)
	}
	for _, be := range b.backends {
		b.wg.Add(1)
		go b.watch(be)
	}
	b.wg.Add(1)
	go b.serve()
}

// watch checks be's /readyz every interval until close. A check dials a
// fresh connection and fails on an error, a status other than 200 or no
// answer within the interval, or a second if that is longer: a replica
// that is stopping or gone fails a check at once, and a busy machine
// must not.
func (b *balancer) watch(be *backend) {
	defer b.wg.Done()
	tick := time.NewTicker(b.cfg.interval)
	defer tick.Stop()
	h := health{in: true}
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(b.ctx, max(b.cfg.interval, time.Second))
		err := get(ctx, b.check, "https://"+be.addr+"/readyz")
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		// Counted before the state changes, so that a reader who sees a
		// replica out sees the failures that marked it out.
		if err != nil {
			be.checksFailed.Add(1)
		}
		h = h.after(err == nil, b.cfg)
		be.in.Store(h.in)
		be.checks.Add(1)
	}
}

// health is what a replica's checks so far have decided.
type health struct {
	in            bool
	fails, passes int // consecutive
}

// after is h after a check that passed or not: out after cfg.unhealthy
// failures in a row, in after cfg.healthy passes in a row, else as it
// was.
func (h health) after(passed bool, cfg balancerConfig) health {
	if passed {
		h.fails, h.passes = 0, h.passes+1
		if h.passes >= cfg.healthy {
			h.in = true
		}
		return h
	}
	h.fails, h.passes = h.fails+1, 0
	if h.fails >= cfg.unhealthy {
		h.in = false
	}
	return h
}

// pick is the next replica in round robin that is in, or nil if none is.
func (b *balancer) pick() *backend {
	n := uint64(len(b.backends))
	start := b.next.Add(1) - 1
	for i := range n {
		if be := b.backends[(start+i)%n]; be.in.Load() {
			return be
		}
	}
	return nil
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		client, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: net/http's Serve waits too.
			select {
			case <-b.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		be := b.pick()
		if be == nil {
			b.refused.Add(1)
			reset(client)
			continue
		}
		be.conns.Add(1)
		if !b.track(client) {
			reset(client)
			return
		}
		b.wg.Add(1)
		go b.forward(client, be)
	}
}

// forward connects client to be and copies both ways until both sides
// are done. A replica that cannot be reached resets the client's
// connection: a network load balancer passes the replica's own refusal on
// and tries no other replica.
func (b *balancer) forward(client net.Conn, be *backend) {
	defer b.wg.Done()
	defer b.untrack(client)
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.DialContext(b.ctx, "tcp", be.addr)
	if err != nil {
		be.dialErrors.Add(1)
		reset(client)
		return
	}
	if !b.track(server) {
		reset(server)
		reset(client)
		return
	}
	defer b.untrack(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(server, client)
	}()
	pipe(client, server)
	<-done
}

// pipe copies from src to dst until src ends. An orderly end (EOF) is
// passed on as one, half-closing dst; a reset or any other error resets
// dst, as a proxy that keeps no bytes of its own must.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	reset(dst)
	_ = src.Close()
}

// reset closes c with a TCP RST rather than a FIN, as a connection that
// was refused or broken ends.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// track records c, to be closed by close; false if the balancer is closed.
func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
	_ = c.Close()
}

// waitIn waits until replica i is in.
func (b *balancer) waitIn(ctx context.Context, i int) error {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !b.backends[i].in.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// close stops accepting and checking, closes every forwarded connection
// and waits for its goroutines.
func (b *balancer) close() error {
	err := b.ln.Close()
	b.cancel()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		_ = c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (b *balancer) stats() BalancerStats {
	s := BalancerStats{Addr: b.addr(), Refused: b.refused.Load(), Replicas: make([]ReplicaStats, len(b.backends))}
	for i, be := range b.backends {
		s.Replicas[i] = ReplicaStats{
			Addr:         be.addr,
			In:           be.in.Load(),
			Conns:        be.conns.Load(),
			DialErrors:   be.dialErrors.Load(),
			Checks:       be.checks.Load(),
			ChecksFailed: be.checksFailed.Load(),
		}
	}
	return s
}
