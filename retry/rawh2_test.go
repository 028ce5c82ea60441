package retry_test

// The raw HTTP/2 server of the wire tests: frames a real server sends only
// by accident (a GOAWAY or a RST_STREAM at a chosen moment, or silence).

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// RawH2 is an HTTP/2 server over TLS built on x/net/http2's Framer, for
// tests that need frames a real server sends only by accident: a GOAWAY or
// a RST_STREAM at a chosen moment, or silence. It acknowledges SETTINGS and
// PING by itself and hands every request to a handler, which answers
// through the [H2Conn].
type RawH2 struct {
	// URL is https://127.0.0.1:port.
	URL string
	// ClientTLS trusts the server's certificate.
	ClientTLS *tls.Config

	handle   func(*H2Conn, H2Request)
	ln       net.Listener
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []*H2Conn
	accepted atomic.Int32
}

// H2Request is what the handler learns about a request: its HEADERS frame.
type H2Request struct {
	StreamID     uint32
	Method, Path string
}

// H2Conn is one server connection. Its methods are safe for concurrent use.
type H2Conn struct {
	nc     net.Conn
	silent atomic.Bool

	mu  sync.Mutex // guards writes
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder
}

// NewRawH2 starts the server; it stops when tb ends. handle runs on the
// connection's read loop once the request is complete (its END_STREAM
// arrived): frames that follow wait until it returns.
func NewRawH2(tb testing.TB, handle func(*H2Conn, H2Request)) *RawH2 {
	tb.Helper()
	cert := httptest.NewUnstartedServer(nil)
	cert.EnableHTTP2 = true
	cert.StartTLS()
	certs := cert.TLS.Certificates
	clientTLS := cert.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cert.Close()

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: certs, NextProtos: []string{http2.NextProtoTLS}})
	if err != nil {
		tb.Fatal(err)
	}
	s := &RawH2{URL: "https://" + ln.Addr().String(), ClientTLS: clientTLS, handle: handle, ln: ln}
	s.wg.Add(1)
	go s.accept()
	tb.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// Accepted reports how many connections the server accepted.
func (s *RawH2) Accepted() int { return int(s.accepted.Load()) }

func (s *RawH2) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		c := &H2Conn{nc: nc, fr: http2.NewFramer(nc, nc)}
		c.enc = hpack.NewEncoder(&c.buf)
		c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer nc.Close()
			s.serve(c)
		}()
	}
}

func (s *RawH2) serve(c *H2Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.nc, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	if c.write(func() error { return c.fr.WriteSettings() }) != nil {
		return
	}
	open := map[uint32]H2Request{} // requests whose body is still coming
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if c.silent.Load() {
			continue
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.write(c.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			r := H2Request{StreamID: f.StreamID, Method: f.PseudoValue("method"), Path: f.PseudoValue("path")}
			if f.StreamEnded() {
				s.handle(c, r)
			} else {
				open[f.StreamID] = r
			}
		case *http2.DataFrame:
			if r, ok := open[f.StreamID]; ok && f.StreamEnded() {
				delete(open, f.StreamID)
				s.handle(c, r)
			}
		}
	}
}

func (c *H2Conn) write(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f()
}

// Respond answers stream id with status and body.
func (c *H2Conn) Respond(id uint32, status int, body string) error {
	return c.write(func() error {
		c.buf.Reset()
		_ = c.enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(status)})
		_ = c.enc.WriteField(hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true, EndStream: body == ""}); err != nil {
			return err
		}
		if body == "" {
			return nil
		}
		return c.fr.WriteData(id, true, []byte(body))
	})
}

// Reset sends RST_STREAM with code on stream id.
func (c *H2Conn) Reset(id uint32, code http2.ErrCode) error {
	return c.write(func() error { return c.fr.WriteRSTStream(id, code) })
}

// GoAway sends GOAWAY: streams above lastStreamID were not processed.
func (c *H2Conn) GoAway(lastStreamID uint32, code http2.ErrCode) error {
	return c.write(func() error { return c.fr.WriteGoAway(lastStreamID, code, nil) })
}

// Silence stops the connection from answering anything, PINGs included,
// while it keeps reading: a peer that stopped answering.
func (c *H2Conn) Silence() { c.silent.Store(true) }

// Close closes the connection (FIN).
func (c *H2Conn) Close() error { return c.nc.Close() }

// ResetConn closes the connection with a TCP reset, without a TLS
// close_notify.
func (c *H2Conn) ResetConn() error {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return c.nc.Close()
	}
	if t, ok := tc.NetConn().(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	return tc.NetConn().Close()
}
