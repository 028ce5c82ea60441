package soak

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
)

// apiProxy is the API server as the gateway process sees it: an HTTPS
// server (HTTP/2) that forwards every request to the real API server as
// the gateway's user. It stands behind the fault proxy, so the faults act
// on the gateway's own connections, and it does what an in-process hook
// under the gateway's stack did before:
//
//   - It marks the Audit-ID of an operation's request (the gateway sends
//     the operation's ID as it is) with [kubeadapter.Resendable]'s answer
//     on the bytes the gateway sent, which the checker needs to tell a
//     violation from a permitted re-send.
//   - It keeps what happened to each operation's requests that failed on
//     the way to the API server ([causeLog]): the gateway's answer to the
//     client names no cause, and the gateway's own errors name the proxy's
//     cut, not what the API server did; and the writes that got no answer
//     ([Unanswered]), which a killed API server may have applied unlogged.
//   - With resendPOST, it is a deliberately broken hop that sends every
//     POST twice, whatever the first did, and answers with the first
//     answer it got: the duplicates the checker must catch.
//
// An upstream failure cuts the gateway's stream, which is what a lost
// connection looks like from its side; a dial that fails (the API server
// restarting) too, though nothing was sent: the proxy cannot make the
// gateway's dial refused, and a friendlier answer, a 503 with
// Retry-After, would spare the gateway the restart the soak puts it
// through.
type apiProxy struct {
	srv        *httptest.Server
	upstream   http.RoundTripper
	host       string
	resendPOST bool
	resent     atomic.Int32
	causes     causeLog
}

// newAPIProxy starts an apiProxy to user's API server, until tb ends.
func newAPIProxy(tb testing.TB, user *rest.Config, resendPOST bool) *apiProxy {
	tb.Helper()
	rt, err := rest.TransportFor(user)
	if err != nil {
		tb.Fatal(err)
	}
	u, err := url.Parse(user.Host)
	if err != nil {
		tb.Fatal(err)
	}
	p := &apiProxy{upstream: rt, host: u.Host, resendPOST: resendPOST}
	p.srv = httptest.NewUnstartedServer(p)
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	tb.Cleanup(func() {
		p.srv.Close()
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	})
	return p
}

// config is the gateway's config for p: its address and CA, and no
// credentials, which p adds.
func (p *apiProxy) config() *rest.Config {
	cert := p.srv.Certificate()
	return &rest.Config{
		Host:            p.srv.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: pemCert(cert.Raw)},
	}
}

func (p *apiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	op, _, _ := ParseAuditID(r.Header.Get("Audit-ID"))
	out := p.outbound(r, body)
	sent := time.Now()
	resp, err := p.upstream.RoundTrip(out)
	if p.resendPOST && r.Method == http.MethodPost {
		p.resent.Add(1)
		again, err2 := p.upstream.RoundTrip(p.outbound(r, body))
		switch {
		case err != nil:
			resp, err = again, err2
		case err2 == nil:
			_ = again.Body.Close()
		}
	}
	if err != nil {
		u := failed(err)
		u.Unanswered = unanswered(r, body, sent)
		p.causes.add(op, u)
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	p.causes.add(op, answered(resp.StatusCode))
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	// Watches stream: every chunk goes on at once.
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			return
		}
		if rerr != nil {
			p.causes.add(op, failed(rerr))
			panic(http.ErrAbortHandler)
		}
	}
}

// outbound is r as p sends it upstream, with a body of its own that
// [kubeadapter.Resendable] can read, and the Audit-ID marked.
func (p *apiProxy) outbound(r *http.Request, body []byte) *http.Request {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = "https", p.host, ""
	out.ContentLength = int64(len(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.Body, _ = out.GetBody()
	if len(body) == 0 {
		out.Body, out.GetBody = http.NoBody, nil
	}
	if op, _, ok := ParseAuditID(r.Header.Get("Audit-ID")); ok {
		out.Header.Set("Audit-ID", AuditID(op, kubeadapter.Resendable(out)))
	}
	return out
}
