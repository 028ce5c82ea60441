// Package redact masks the password of a URL's userinfo before the URL is
// printed, logged or put in an error, as net/http does in the *url.Error of
// a request ("user:***@host"). It is the gateway's copy of cmd/kubewire's
// (tested there): a program you copy imports no module's internal package.
package redact

import (
	"io"
	"regexp"
	"strconv"
	"strings"
)

// String replaces the password in the userinfo of host, a URL or a bare
// host[:port] as rest.Config.Host may hold it, with "***". It finds the
// password where url.Parse would (in the authority: after "://", up to the
// first '/', '?' or '#'; before its last '@'; after the first ':'), but
// needs no parse: the hosts it guards against need not be valid URLs.
func String(host string) string {
	start := 0
	if strings.HasPrefix(host, "//") {
		start = len("//") // a URL without a scheme
	} else if i := strings.Index(host, "://"); i >= 0 {
		start = i + len("://")
	}
	authority := host[start:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return host
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 {
		return host
	}
	return host[:start+colon+1] + "***" + host[start+at:]
}

// In masks the password of host wherever host appears in s, as is or
// quoted with %q. It matches strings because errors quote a host that does
// not parse: client-go's rest.DefaultServerURL ("host must be a URL or a
// host:port pair: %q"), and the *url.Error of url.Parse ("parse %q: ...").
func In(s, host string) string {
	masked := String(host)
	if masked == host {
		return s
	}
	q, mq := strconv.Quote(host), strconv.Quote(masked)
	s = strings.ReplaceAll(s, q[1:len(q)-1], mq[1:len(mq)-1])
	return strings.ReplaceAll(s, host, masked)
}

// Writer writes to W with the password of Host masked wherever Host shows
// ([In]), and that of every other URL ([Text]), in every write. A write
// that splits a URL in two is not masked, so give it whole lines, as a
// logger or fmt.Fprintf does.
type Writer struct {
	W    io.Writer
	Host string
}

func (r Writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(r.W, Text(In(string(p), r.Host))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// urlPassword matches the password of a URL, with a scheme or without
// (//user:password@), and of a host without a scheme at the start of the
// text as rest.Config.Host may be (user:password@). As net/url reads
// it, the userinfo ends at the last "@" of the authority, and the user at
// its first ":".
var urlPassword = regexp.MustCompile(`(^|//)([^/?#:\s"]*):[^/?#\s"]*@`)

// Text masks the password of every URL with a scheme in s, and of a bare
// user:password@host at its start, for text whose host is not known, such
// as an error from loading a kubeconfig. Where the host is known, [In] also
// finds it quoted without a scheme.
func Text(s string) string {
	return urlPassword.ReplaceAllString(s, "${1}${2}:***@")
}
