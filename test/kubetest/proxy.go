package kubetest

import (
	"net"
	"net/url"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// Proxied returns a copy of cfg pointed at a fault proxy in front of its
// API server, and the proxy, which closes when tb ends. Its own dialer
// keeps client-go from sharing a cached transport, and so a pool, with
// other configs.
func Proxied(tb testing.TB, cfg *rest.Config) (*rest.Config, *transporttest.Proxy) {
	tb.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := transporttest.NewProxy(u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + p.Addr()
	cfg.Dial = (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	return cfg, p
}
