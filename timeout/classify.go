package timeout

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// LongRunning reports whether req is a long-running Kubernetes API request,
// the way the API server decides which requests its own timeout exempts:
//
//   - a watch: query parameter watch set and not "false" or "0", or a path
//     under /api/v1/watch/ or /apis/<group>/<version>/watch/;
//   - a log that follows: subresource log with follow set and not "false"
//     or "0";
//   - the subresources exec, attach, portforward and proxy, and the legacy
//     /proxy/ paths;
//   - any protocol upgrade (a Connection header naming "upgrade").
//
// The API path may sit below a prefix (a proxy that serves the API at
// /k8s/clusters/<id>/api/v1/...). Requests that are not Kubernetes API paths
// are long-running only by their query or an upgrade.
func LongRunning(req *http.Request) bool {
	if req == nil || req.URL == nil {
		return false
	}
	if roundtrip.IsUpgrade(req) {
		return true
	}
	// Every request is classified, so this allocates nothing: the query is
	// scanned, not parsed into a map, and the path split into an array on
	// the stack.
	q := req.URL.RawQuery
	if flag(q, "watch") {
		return true
	}
	switch sub := subresource(req.URL.Path); sub {
	case "exec", "attach", "portforward", "proxy", "watch":
		return true
	case "log":
		return flag(q, "follow")
	}
	return false
}

// flag reports whether the first value of key in the raw query is set,
// following apimachinery's conversion of a query string to a bool: present
// and not "0" or "false" (any case) is true. Pairs that url.ParseQuery
// would drop (a bad escape, a semicolon) are skipped.
func flag(raw, key string) bool {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, ok := unescape(k)
		if !ok || k != key {
			continue
		}
		if v, ok = unescape(v); !ok {
			continue
		}
		return v != "0" && !strings.EqualFold(v, "false")
	}
	return false
}

// unescape decodes a query component, and reports whether it is valid.
func unescape(s string) (string, bool) {
	if !strings.ContainsAny(s, "%+") {
		return s, true
	}
	u, err := url.QueryUnescape(s)
	return u, err == nil
}

var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// subresource returns the subresource of a Kubernetes API path ("exec",
// "log", ...), "watch" for a legacy watch path, "proxy" for a legacy proxy
// path, or "" for anything else. It follows the API server's RequestInfo
// parsing: /api/<version>/... or /apis/<group>/<version>/..., then an
// optional namespaces/<ns>, then <resource>/<name>/<subresource>.
func subresource(path string) string {
	var buf [32]string
	parts := segments(strings.Trim(path, "/"), buf[:0])
	rest := -1
	for i, p := range parts {
		if p == "api" && i+1 < len(parts) {
			rest = i + 2
			break
		}
		if p == "apis" && i+2 < len(parts) {
			rest = i + 3
			break
		}
	}
	if rest < 0 || rest >= len(parts) {
		return ""
	}
	parts = parts[rest:]
	switch parts[0] {
	case "watch":
		return "watch"
	case "proxy":
		return "proxy"
	}
	if parts[0] == "namespaces" && len(parts) > 2 && !namespaceSubresources[parts[2]] {
		parts = parts[2:]
	}
	if len(parts) >= 3 {
		return parts[2]
	}
	return ""
}

// segments appends the /-separated segments of p to dst. With room in dst
// for all of them, it allocates nothing.
func segments(p string, dst []string) []string {
	for {
		seg, rest, found := strings.Cut(p, "/")
		dst = append(dst, seg)
		if !found {
			return dst
		}
		p = rest
	}
}
