package kubeadapter

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	clientgofeatures "k8s.io/client-go/features"
	"k8s.io/client-go/rest"
)

// cloning reports whether an option needs the clients' own clone of the
// base transport: WithHTTP2Health or WithIdleConnTimeout.
func (c *config) cloning() bool { return c.http2 || c.idle > 0 }

// options names the options that need a clone, for messages.
func (c *config) options() string {
	var names []string
	if c.http2 {
		names = append(names, "WithHTTP2Health")
	}
	if c.idle > 0 {
		names = append(names, "WithIdleConnTimeout")
	}
	return strings.Join(names, " and ")
}

// cloneApplies returns why the options that clone the base transport
// cannot apply to cfg, or nil. It checks what the config alone decides;
// cloner.wrap reports the rest.
func cloneApplies(cfg *rest.Config, c *config) error {
	prefix := "kubeadapter: " + c.options() + " cannot apply: "
	h2c := false // HTTP/2 without TLS, to a plain-http server
	if c.http2 {
		var err error
		if h2c, err = plainHTTP(cfg); err != nil {
			return fmt.Errorf("%s%w", prefix, err)
		}
	}
	if cfg.Transport != nil {
		t, ok := cfg.Transport.(*http.Transport)
		if !ok {
			return fmt.Errorf(prefix+"it needs client-go's transport or an *http.Transport, got rest.Config.Transport of type %T", cfg.Transport)
		}
		if c.http2 && !h2c && !http2Enabled(t) {
			return errors.New(prefix + "rest.Config.Transport has HTTP/2 off")
		}
		return nil
	}
	if c.http2 {
		// The checks of apimachinery's utilnet.SetTransportDefaults.
		if os.Getenv("DISABLE_HTTP2") != "" {
			return errors.New(prefix + "HTTP/2 is off: DISABLE_HTTP2 is set")
		}
		if np := cfg.TLSClientConfig.NextProtos; len(np) > 0 && !slices.Contains(np, "h2") {
			return fmt.Errorf(prefix+"HTTP/2 is off: rest.Config.TLSClientConfig.NextProtos is %q", np)
		}
	}
	// client-go's transport.loadTLSFiles and tlsTransportCache.get.
	if cfg.TLSClientConfig.CAFile != "" && len(cfg.TLSClientConfig.CAData) == 0 && caRotation() {
		return fmt.Errorf(prefix+"client-go (v0.36 and later, feature ClientsAllowCARotation) reloads the CA file %s through a transport it swaps when the file changes, which a clone would not follow; give the CA as CAData", cfg.TLSClientConfig.CAFile)
	}
	return nil
}

// caRotation reports whether client-go reloads a CA file, which it does
// from v0.36 on when its feature ClientsAllowCARotation is on. Earlier
// releases have no such feature, and a feature gate asked about a feature
// it does not know panics (client-go's envVarFeatureGates.Enabled, and
// component-base's gates that replace them): that panic means the release
// reads the CA file once, so a clone follows it.
func caRotation() (on bool) {
	defer func() {
		if recover() != nil {
			on = false
		}
	}()
	return clientgofeatures.FeatureGates().Enabled("ClientsAllowCARotation")
}

// plainHTTP looks at cfg's server URL. When it is plain http (kubectl
// proxy serves it), net/http speaks HTTP/2 only if rest.Config.Transport
// asks for it without TLS (Protocols.UnencryptedHTTP2): then it reports
// h2c, else an error saying the clients speak HTTP/1.1. For an https
// server it reports neither.
func plainHTTP(cfg *rest.Config) (h2c bool, err error) {
	u, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil || u.Scheme != "http" {
		// A host client-go cannot parse fails when the client is built,
		// with client-go's own error.
		return false, nil
	}
	if t, ok := cfg.Transport.(*http.Transport); ok && t.Protocols != nil && t.Protocols.UnencryptedHTTP2() {
		return true, nil
	}
	return false, fmt.Errorf("HTTP/2 is off: the server %s is plain http, which client-go speaks in HTTP/1.1", u.Redacted())
}

// http2Enabled reports whether t will speak HTTP/2 over TLS, by the rules
// of net/http's Transport.protocols on Go 1.26 and 1.27: Protocols if set
// (x/net/http2's ConfigureTransports sets it on Go 1.27), else an "h2" entry
// in TLSNextProto (ConfigureTransports on Go 1.26), else the default, which
// a custom TLS config or dialer turns off unless ForceAttemptHTTP2.
func http2Enabled(t *http.Transport) bool {
	switch {
	case t.Protocols != nil:
		return t.Protocols.HTTP2()
	case t.TLSNextProto != nil:
		return t.TLSNextProto["h2"] != nil
	case t.ForceAttemptHTTP2:
		return true
	}
	return t.TLSClientConfig == nil && t.Dial == nil && t.DialContext == nil && t.DialTLS == nil && t.DialTLSContext == nil
}

// cloner makes the clone of client-go's base transport that the package
// documentation describes: one per base transport, shared by every client
// built from the config.
type cloner struct {
	http2          bool // WithHTTP2Health was given
	readIdle, ping time.Duration
	idle           time.Duration // zero: keep the base transport's
	options        string
	logger         logr.Logger
	warned         sync.Once

	mu sync.Mutex
	// clones is keyed by the RoundTripper client-go handed over. Keeping it
	// referenced keeps client-go's transport cache entry, and the
	// certificate-rotation goroutine tied to its lifetime, alive.
	clones map[http.RoundTripper]*http.Transport
}

func newCloner(c *config) *cloner {
	return &cloner{
		http2: c.http2, readIdle: c.readIdle, ping: c.pingTimeout, idle: c.idle,
		options: c.options(), logger: c.logger, clones: map[http.RoundTripper]*http.Transport{},
	}
}

// baseTransport returns the *http.Transport under rt: rt itself, or the one
// inside client-go's trackedTransport, the pass-through wrapper its TLS
// cache puts around cached transports. Any other wrapper (client-go's
// atomicTransportHolder, which swaps transports when a CA file changes, or
// a user's RoundTripper) is not looked into: cloning below it would break
// what it does. The error names what was found instead.
func baseTransport(rt http.RoundTripper) (*http.Transport, error) {
	typ := reflect.TypeOf(rt)
	if typ != nil && typ.Kind() == reflect.Pointer && typ.Elem().PkgPath() == "k8s.io/client-go/transport" && typ.Elem().Name() == "trackedTransport" {
		if w, ok := rt.(interface{ WrappedRoundTripper() http.RoundTripper }); ok {
			rt = w.WrappedRoundTripper()
		}
	}
	if t, ok := rt.(*http.Transport); ok {
		return t, nil
	}
	return nil, fmt.Errorf("the base transport is a %T, not an *http.Transport it may clone", rt)
}

func (cl *cloner) wrap(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport // as every middleware does
	}
	base, err := baseTransport(rt)
	if err != nil {
		cl.warn(err)
		return rt
	}
	h2 := http2Enabled(base)
	if cl.http2 && !h2 {
		cl.warn(errors.New("the base transport has HTTP/2 off"))
		return rt
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if c, ok := cl.clones[rt]; ok {
		return c
	}
	// Clone keeps TLSClientConfig (CA, client certificates and the
	// certificate callback of exec plugins), the dialer (exec plugins'
	// connection tracker) and the proxy.
	c := base.Clone()
	if cl.idle > 0 {
		c.IdleConnTimeout = cl.idle
	}
	if h2 {
		// The clone does not keep an HTTP/2 implementation registered
		// through x/net/http2 (Go 1.26: TLSNextProto; Go 1.27: the
		// transport's registered HTTP/2 config): it is bound to the
		// original, its pool and its timings. The clone uses net/http's own
		// HTTP/2, with the health check in HTTP2.
		c.TLSNextProto = nil
		if c.Protocols == nil {
			c.Protocols = new(http.Protocols)
			c.Protocols.SetHTTP1(true)
		}
		c.Protocols.SetHTTP2(true)
		switch {
		case cl.http2:
			if c.HTTP2 == nil {
				c.HTTP2 = &http.HTTP2Config{}
			}
			c.HTTP2.SendPingTimeout, c.HTTP2.PingTimeout = cl.readIdle, cl.ping
		case c.HTTP2 == nil:
			// The base's health check lives in the x/net/http2 transport
			// client-go configured; its timings are client-go's.
			c.HTTP2 = &http.HTTP2Config{}
			c.HTTP2.SendPingTimeout, c.HTTP2.PingTimeout = clientGoHealth()
		}
	}
	cl.clones[rt] = c
	return c
}

// clientGoHealth returns the HTTP/2 health check client-go gives every
// client (apimachinery's utilnet: HTTP2_READ_IDLE_TIMEOUT_SECONDS, 30 by
// default, 0 turning it off; HTTP2_PING_TIMEOUT_SECONDS, 15 by default),
// for a clone that must keep it.
func clientGoHealth() (readIdle, ping time.Duration) {
	seconds := func(env string, def int) time.Duration {
		n, err := strconv.Atoi(os.Getenv(env))
		if err != nil {
			n = def
		}
		return time.Duration(n) * time.Second
	}
	return seconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", 30), seconds("HTTP2_PING_TIMEOUT_SECONDS", 15)
}

// warn logs once why the clone does not apply.
func (cl *cloner) warn(err error) {
	cl.warned.Do(func() {
		cl.logger.Error(err, "kubeadapter: "+cl.options+" does not apply; the client keeps client-go's transport")
	})
}
