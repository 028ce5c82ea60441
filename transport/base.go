package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// Defaults of the base transport.
const (
	// DefaultIdleConnTimeout is below the idle timeouts of common load
	// balancers (AWS ALB 60s, Azure 4m, GCP 10m), so the client closes an
	// idle connection before a middlebox silently drops it.
	DefaultIdleConnTimeout = 45 * time.Second
	// DefaultHTTP2ReadIdleTimeout and DefaultHTTP2PingTimeout match the
	// values client-go uses (HTTP2_READ_IDLE_TIMEOUT_SECONDS and
	// HTTP2_PING_TIMEOUT_SECONDS).
	DefaultHTTP2ReadIdleTimeout = 30 * time.Second
	DefaultHTTP2PingTimeout     = 15 * time.Second
	// DefaultDialTimeout bounds TCP connection setup. The dial is detached
	// from request cancellation in net/http, so this is its only bound.
	DefaultDialTimeout = 30 * time.Second
	// DefaultTLSHandshakeTimeout bounds the TLS handshake.
	DefaultTLSHandshakeTimeout = 10 * time.Second
)

// Option configures [New].
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	tls                 *tls.Config
	idleConnTimeout     time.Duration
	readIdleTimeout     time.Duration
	pingTimeout         time.Duration
	dialTimeout         time.Duration
	tlsHandshakeTimeout time.Duration
	maxIdleConnsPerHost int
	disableHTTP2        bool
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("transport: %s must be positive, got %v", name, d)
	}
	return nil
}

// WithTLSConfig sets the TLS client configuration. The config is cloned.
// Default: nil, which means the system roots and no client certificate.
func WithTLSConfig(c *tls.Config) Option {
	return optionFunc(func(cfg *config) error {
		if c != nil {
			cfg.tls = c.Clone()
		}
		return nil
	})
}

// WithIdleConnTimeout sets how long an idle pooled connection is kept.
// Keep it below the idle timeout of any load balancer between the client
// and the server. Default: [DefaultIdleConnTimeout]. Must be positive.
func WithIdleConnTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		cfg.idleConnTimeout = d
		return positive("WithIdleConnTimeout", d)
	})
}

// WithHTTP2ReadIdleTimeout sets how long an HTTP/2 connection may receive
// no frame before the client sends a PING to check it
// (http.HTTP2Config.SendPingTimeout; x/net/http2 called it ReadIdleTimeout).
// Default: [DefaultHTTP2ReadIdleTimeout]. Must be positive.
func WithHTTP2ReadIdleTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		cfg.readIdleTimeout = d
		return positive("WithHTTP2ReadIdleTimeout", d)
	})
}

// WithHTTP2PingTimeout sets how long the client waits for the answer to a
// health-check PING before it closes the connection
// (http.HTTP2Config.PingTimeout). Default: [DefaultHTTP2PingTimeout]. Must
// be positive.
func WithHTTP2PingTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		cfg.pingTimeout = d
		return positive("WithHTTP2PingTimeout", d)
	})
}

// WithDialTimeout bounds TCP connection setup. Default:
// [DefaultDialTimeout]. Must be positive.
func WithDialTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		cfg.dialTimeout = d
		return positive("WithDialTimeout", d)
	})
}

// WithTLSHandshakeTimeout bounds the TLS handshake. Default:
// [DefaultTLSHandshakeTimeout]. Must be positive.
func WithTLSHandshakeTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		cfg.tlsHandshakeTimeout = d
		return positive("WithTLSHandshakeTimeout", d)
	})
}

// WithMaxIdleConnsPerHost sets how many idle connections are kept per host.
// Default: go-cleanhttp's, GOMAXPROCS+1. Must be positive.
func WithMaxIdleConnsPerHost(n int) Option {
	return optionFunc(func(cfg *config) error {
		cfg.maxIdleConnsPerHost = n
		if n <= 0 {
			return fmt.Errorf("transport: WithMaxIdleConnsPerHost must be positive, got %d", n)
		}
		return nil
	})
}

// WithoutHTTP2 keeps the transport on HTTP/1.1. Default: HTTP/2 is
// negotiated over TLS when the server offers it.
func WithoutHTTP2() Option {
	return optionFunc(func(cfg *config) error {
		cfg.disableHTTP2 = true
		return nil
	})
}

// New returns a pooled base transport (see the package documentation), or
// an error naming the first invalid option.
//
// net/http sets up TLSNextProto and the TLS NextProtos from Protocols when
// the transport is first used. x/net/http2's ConfigureTransports is not
// used: on Go 1.27 it is a deprecated wrapper over the same fields.
//
// The returned transport is safe for concurrent use. Reuse it: a new
// transport is a new connection pool.
func New(opts ...Option) (*http.Transport, error) {
	cfg := config{
		idleConnTimeout:     DefaultIdleConnTimeout,
		readIdleTimeout:     DefaultHTTP2ReadIdleTimeout,
		pingTimeout:         DefaultHTTP2PingTimeout,
		dialTimeout:         DefaultDialTimeout,
		tlsHandshakeTimeout: DefaultTLSHandshakeTimeout,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return nil, err
		}
	}

	t := cleanhttp.DefaultPooledTransport()
	t.IdleConnTimeout = cfg.idleConnTimeout
	t.TLSHandshakeTimeout = cfg.tlsHandshakeTimeout
	t.DialContext = (&net.Dialer{
		Timeout:   cfg.dialTimeout,
		KeepAlive: 30 * time.Second,
	}).DialContext
	if cfg.maxIdleConnsPerHost > 0 {
		t.MaxIdleConnsPerHost = cfg.maxIdleConnsPerHost
	}
	t.TLSClientConfig = cfg.tls
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	if cfg.disableHTTP2 {
		t.ForceAttemptHTTP2 = false
		return t, nil
	}
	t.ForceAttemptHTTP2 = true
	t.Protocols.SetHTTP2(true)
	t.HTTP2 = &http.HTTP2Config{
		SendPingTimeout: cfg.readIdleTimeout,
		PingTimeout:     cfg.pingTimeout,
	}
	return t, nil
}
