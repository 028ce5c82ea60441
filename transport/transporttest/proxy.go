package transporttest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what a [Proxy] does to the connections it applies to, and what
// it reports to its observer ([Proxy.SetObserver]) when it does it. Every
// value but [IdleDrop] is a fault to set.
type Fault int

const (
	// NoFault forwards bytes unchanged.
	NoFault Fault = iota
	// ResetBeforeForward resets the client connection when the client sends
	// data, without forwarding it: the server never sees the request.
	ResetBeforeForward
	// ResetAfterResponse forwards the client's data, then resets the client
	// connection when the server answers instead of forwarding the answer:
	// the server executed the request, the client never learns it.
	ResetAfterResponse
	// CloseOnSend closes the client connection (FIN) when the client sends
	// data, without forwarding it: a server closing an idle keep-alive
	// connection at the moment the client reuses it.
	CloseOnSend
	// Stall forwards the client's data but holds the server's answer until
	// the fault is cleared or the proxy closes.
	Stall
	// Hold holds the bytes of both directions and delivers them, in order,
	// when the fault is cleared: each side sees a peer that stopped
	// answering. Nothing is dropped, so TLS and HTTP/2 streams stay intact
	// and a connection dies only if an endpoint gives up on it (a health
	// check, a deadline), never because a frame in flight went missing.
	Hold
	// BlackHole makes a connection dead for good once it carries data while
	// the fault applies: from then on the proxy delivers nothing on it in
	// either direction, and closes nothing. Each side sees a peer that
	// stopped answering, as when a load balancer or NAT forgets a flow, and
	// the connection ends only when an endpoint gives up on it (a health
	// check, a deadline); the proxy then closes the other side. What is
	// sent on it afterwards is read and
	// discarded; since nothing more is ever delivered, no stream is cut at a
	// point either side could mistake for data. Clearing the fault spares
	// the connections it has not reached yet; dead ones stay dead.
	BlackHole
	// IdleDrop is only reported, to the observer, when [Proxy.SetIdleDrop]
	// resets a connection: it depends on a duration, which SetIdleDrop
	// takes. Passing it to SetFault or its siblings panics.
	IdleDrop
)

func (f Fault) String() string {
	switch f {
	case NoFault:
		return "none"
	case ResetBeforeForward:
		return "reset-before-forward"
	case ResetAfterResponse:
		return "reset-after-response"
	case CloseOnSend:
		return "close-on-send"
	case Stall:
		return "stall"
	case Hold:
		return "hold"
	case BlackHole:
		return "black-hole"
	case IdleDrop:
		return "idle-drop"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Proxy is a loopback TCP proxy that injects connection faults between a
// client and a server. It works below TLS and HTTP, so the same faults
// apply to HTTP/1.1 and HTTP/2. It listens on 127.0.0.1 only, and its
// methods are safe for concurrent use: a test changes the fault while
// connections run. Make one with [NewProxy] or [BehindProxy]; the zero
// value is not usable.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	fault Fault
	scope uint64 // the fault applies to connections with seq < scope; 0 means all
	once  bool
	// held is the connection a fault set once holds (Stall, Hold), 0
	// before it fires: the fault then acts on it alone until replaced.
	held     uint64
	latency  time.Duration
	idleDrop time.Duration
	observer func(Fault)
	seq      uint64
	conns    map[net.Conn]struct{}
	clients  map[net.Conn]struct{}
	accepted int
	closed   bool
	wg       sync.WaitGroup
}

// NewProxy starts a proxy on 127.0.0.1 that forwards to target
// (host:port). The caller closes it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, clients: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted reports how many client connections the proxy accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// SetFault applies f to every connection, current and future.
func (p *Proxy) SetFault(f Fault) { p.set(f, false, false) }

// SetFaultOnce applies f to the next connection it fires on, current or
// future, and then clears for every other connection. A fault that holds
// ([Stall], [Hold]) holds that one connection until the fault is replaced
// (SetFault(NoFault)) or the proxy closes; a [BlackHole] leaves it dead.
func (p *Proxy) SetFaultOnce(f Fault) { p.set(f, false, true) }

// SetFaultExisting applies f only to the connections open now, which are
// the ones a client will reuse; connections opened later pass unharmed.
func (p *Proxy) SetFaultExisting(f Fault) { p.set(f, true, false) }

// SetFaultExistingOnce applies f to the first of the connections open now
// that it fires on, and then clears; connections opened later pass
// unharmed.
func (p *Proxy) SetFaultExistingOnce(f Fault) { p.set(f, true, true) }

// set replaces the fault. It panics on a Fault that is no fault to set,
// as a misuse of the API: the call would otherwise do nothing, and the
// test that made it would pass without its fault.
func (p *Proxy) set(f Fault, existing, once bool) {
	if f < NoFault || f >= IdleDrop {
		panic(fmt.Sprintf("transporttest: %v is not a fault to set (an idle drop is set with SetIdleDrop)", f))
	}
	p.mu.Lock()
	p.fault, p.scope, p.once, p.held = f, 0, once, 0
	if existing {
		p.scope = p.seq + 1
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// SetLatency delays the server's answer by d: the first chunk the server
// sends after each chunk from the client waits d.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetIdleDrop imitates a load balancer or NAT that forgets a flow idle for
// longer than d: when the client sends on a connection that carried nothing
// for more than d, the proxy resets it instead of forwarding. Zero turns it
// off.
func (p *Proxy) SetIdleDrop(d time.Duration) {
	p.mu.Lock()
	p.idleDrop = d
	p.mu.Unlock()
}

// SetObserver calls f, from the proxy's own goroutines, each time a fault
// acts on a connection: a reset, a close, an idle drop, a connection that
// starts to stall or hold, a connection that becomes a black hole (once per
// connection). f must not call the proxy. Nil turns it off.
func (p *Proxy) SetObserver(f func(Fault)) {
	p.mu.Lock()
	p.observer = f
	p.mu.Unlock()
}

func (p *Proxy) observe(f Fault) {
	p.mu.Lock()
	obs := p.observer
	p.mu.Unlock()
	if obs != nil {
		obs(f)
	}
}

// ResetAll resets (TCP RST) every client connection open now, as a load
// balancer dropping its flows or a server restart does, and reports how
// many it reset. Each reset connection's server side is closed too.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.clients {
		reset(c)
	}
	return len(p.clients)
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// fire returns the fault that acts on data of connection seq going to the
// server (toServer) or back to the client, and, for a fault set once,
// consumes it in the same critical section, so that two connections never
// both take it: a fault that holds binds to seq, any other clears.
func (p *Proxy) fire(seq uint64, toServer bool) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.fault
	if f == NoFault || (p.scope != 0 && seq >= p.scope) || !f.acts(toServer) {
		return NoFault
	}
	if p.once {
		switch {
		case p.held != 0 && p.held != seq:
			return NoFault
		case f == Stall || f == Hold:
			p.held = seq
		default:
			p.fault = NoFault
		}
	}
	return f
}

// acts reports whether f acts on data going to the server (toServer) or
// back to the client.
func (f Fault) acts(toServer bool) bool {
	switch f {
	case ResetBeforeForward, CloseOnSend:
		return toServer
	case ResetAfterResponse, Stall:
		return !toServer
	}
	return f == Hold || f == BlackHole
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	p.seq++
	p.accepted++
	seq := p.seq
	p.mu.Unlock()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	p.mu.Lock()
	p.clients[client] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.clients, client)
		p.mu.Unlock()
	}()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	done := make(chan struct{}, 2)
	st := &connState{}
	st.last.Store(time.Now().UnixNano())
	go func() { p.pipe(seq, client, server, true, st); done <- struct{}{} }()
	go func() { p.pipe(seq, server, client, false, st); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// pipe copies src to dst, applying faults. toServer says which direction it
// is; the client connection is src when toServer, dst otherwise.
// connState is shared by the two directions of one connection.
type connState struct {
	// asked is set when the client sent data the server has not answered.
	asked atomic.Bool
	// last is when the connection last carried bytes, in Unix nanoseconds.
	last atomic.Int64
	// dead is set when the connection became a black hole.
	dead atomic.Bool
}

func (p *Proxy) pipe(seq uint64, src, dst net.Conn, toServer bool, st *connState) {
	buf := make([]byte, 32<<10)
	client := src
	if !toServer {
		client = dst
	}
	for {
		n, err := src.Read(buf)
		if n > 0 && st.dead.Load() {
			continue
		}
		if n > 0 {
			now := time.Now()
			idle := now.Sub(time.Unix(0, st.last.Swap(now.UnixNano())))
			p.mu.Lock()
			drop := p.idleDrop
			p.mu.Unlock()
			if toServer && drop > 0 && idle > drop {
				p.observe(IdleDrop)
				reset(client)
				return
			}
			switch f := p.fire(seq, toServer); f {
			case Hold, Stall:
				p.observe(f)
				if !p.wait(seq, f) {
					return
				}
			case BlackHole:
				if !st.dead.Swap(true) {
					p.observe(BlackHole)
				}
				continue
			case ResetBeforeForward, ResetAfterResponse:
				p.observe(f)
				reset(client)
				return
			case CloseOnSend:
				p.observe(f)
				_ = client.Close()
				return
			}
			if toServer {
				st.asked.Store(true)
			} else if st.asked.Swap(false) {
				p.mu.Lock()
				d := p.latency
				p.mu.Unlock()
				if d > 0 {
					time.Sleep(d)
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// wait blocks while fault f (Stall or Hold) applies to seq. It reports false
// if the proxy closed meanwhile.
func (p *Proxy) wait(seq uint64, f Fault) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && p.fault == f && (p.scope == 0 || seq < p.scope) && (!p.once || p.held == seq) {
		p.cond.Wait()
	}
	return !p.closed
}
