package redact_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/internal/redact"
)

func TestString(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"https://127.0.0.1:6443", "https://127.0.0.1:6443"},
		{"https://kubewire@127.0.0.1:6443", "https://kubewire@127.0.0.1:6443"},
		{"https://kubewire:pw@127.0.0.1:6443/base", "https://kubewire:***@127.0.0.1:6443/base"},
		{"https://kubewire:@127.0.0.1:6443", "https://kubewire:***@127.0.0.1:6443"},
		{"https://kubewire:p@w:d@127.0.0.1:6443", "https://kubewire:***@127.0.0.1:6443"},
		{"https://127.0.0.1:6443/a:b@c", "https://127.0.0.1:6443/a:b@c"},
		{"https://127.0.0.1:6443?x=a:b@c", "https://127.0.0.1:6443?x=a:b@c"},
		{"kubewire:pw@127.0.0.1:6443", "kubewire:***@127.0.0.1:6443"},
		{"http://user:s3cr3t@[::1", "http://user:***@[::1"},
		{"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, redact.String(tt.give), tt.give)
		if u, err := url.Parse(tt.give); err == nil && strings.Contains(tt.give, "://") {
			// Redacted masks with "xxxxx"; net/http, in a request's
			// *url.Error, and String with "***".
			assert.Equal(t, strings.Replace(u.Redacted(), ":xxxxx@", ":***@", 1), redact.String(tt.give), "as url.URL.Redacted masks %s", tt.give)
		}
	}
}

func TestWriter(t *testing.T) {
	const host = "https://kubewire:s3cr3t@127.0.0.1:bad"
	var b strings.Builder
	w := redact.Writer{W: &b, Host: host}
	line := `driver: host must be a URL or a host:port pair: "` + host + `"` + "\n"
	n, err := w.Write([]byte(line))
	require.NoError(t, err)
	assert.Equal(t, len(line), n, "a Writer reports the bytes it was given")
	assert.Equal(t, `driver: host must be a URL or a host:port pair: "https://kubewire:***@127.0.0.1:bad"`+"\n", b.String())
}

// FuzzString: whatever the input, the password the URL parser finds in it
// does not come out with its userinfo.
func FuzzString(f *testing.F) {
	for _, s := range []string{"http://u:p@h", "u:p@h:1", "https://h/x@y", "http://u:p@[::1", "http://u:@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := redact.String(s)
		u, err := url.Parse(s)
		if err != nil || u.User == nil || !strings.Contains(s, "://") {
			return
		}
		if p, ok := u.User.Password(); ok && p != "***" && strings.Contains(out, u.User.String()+"@") {
			t.Fatalf("String(%q) = %q keeps the userinfo %q", s, out, u.User.String())
		}
	})
}
