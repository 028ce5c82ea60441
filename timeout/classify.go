package timeout

import (
	"net/http"
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
	q := req.URL.RawQuery
	if q != "" {
		query := req.URL.Query()
		if flag(query, "watch") {
			return true
		}
		if flag(query, "follow") && subresource(req.URL.Path) == "log" {
			return true
		}
	}
	switch subresource(req.URL.Path) {
	case "exec", "attach", "portforward", "proxy", "watch":
		return true
	}
	return false
}

// flag follows apimachinery's conversion of a query string to a bool: present
// and not "0" or "false" (any case) is true.
func flag(q map[string][]string, key string) bool {
	v, ok := q[key]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}

var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// subresource returns the subresource of a Kubernetes API path ("exec",
// "log", ...), "watch" for a legacy watch path, "proxy" for a legacy proxy
// path, or "" for anything else. It follows the API server's RequestInfo
// parsing: /api/<version>/... or /apis/<group>/<version>/..., then an
// optional namespaces/<ns>, then <resource>/<name>/<subresource>.
func subresource(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
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
