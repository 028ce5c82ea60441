package redact_test

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/cmd/kubewire/internal/redact"
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

func TestText(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"https://user:s3cr3t@127.0.0.1:6443", "https://user:***@127.0.0.1:6443"},
		{"https://user:s3cr3t@127.0.0.1:6443/prefix", "https://user:***@127.0.0.1:6443/prefix"},
		{"user:s3cr3t@127.0.0.1:6443", "user:***@127.0.0.1:6443"},
		{"https://user:s3c@r3t@127.0.0.1:6443", "https://user:***@127.0.0.1:6443"},
		{"https://user:@127.0.0.1:6443", "https://user:***@127.0.0.1:6443"},
		{"https://:s3cr3t@127.0.0.1:6443", "https://:***@127.0.0.1:6443"},
		{`parse "http://user:s3cr3t@127.0.0.1:bad": invalid port ":bad" after host`, `parse "http://user:***@127.0.0.1:bad": invalid port ":bad" after host`},
		{`Get "http://user:***@127.0.0.1:1/version": connection refused`, `Get "http://user:***@127.0.0.1:1/version": connection refused`},
		{"https://a:1@h:1 and https://b:2@h:2", "https://a:***@h:1 and https://b:***@h:2"},
		// Nothing to mask: no password, or no userinfo.
		{"https://user@127.0.0.1:6443", "https://user@127.0.0.1:6443"},
		{"https://127.0.0.1:6443", "https://127.0.0.1:6443"},
		{"127.0.0.1:6443", "127.0.0.1:6443"},
		{"[::1]:6443", "[::1]:6443"},
		{"dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, redact.Text(tt.give), tt.give)
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

// FuzzString: whatever the input, where the URL parser finds a password in
// it, it finds none but "***" in what String and Text make of it.
func FuzzString(f *testing.F) {
	for _, s := range []string{"http://u:p@h", "u:p@h:1", "https://h/x@y", "http://u:p@[::1", "http://u:@h", "A://:@#:@",
		// Found by this fuzz: a URL without a scheme, a quote or an "@" in the user.
		"//:0@://", "//:@://", "A://':@", "A://@:@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || !strings.Contains(s, "://") {
			return
		}
		if _, ok := u.User.Password(); !ok {
			return
		}
		for name, out := range map[string]string{"String": redact.String(s), "Text": redact.Text(s)} {
			v, err := url.Parse(out)
			if err != nil {
				continue
			}
			if p, ok := v.User.Password(); ok && p != "***" {
				t.Fatalf("%s(%q) = %q keeps the password %q", name, s, out, p)
			}
		}
	})
}

// FuzzIn: a server URL with a password, whatever the user, password and
// rest hold (quotes, spaces, '@', bytes that do not parse), does not show
// its password through a Writer for it, as is or quoted as client-go and
// url.Parse quote a host in their errors.
func FuzzIn(f *testing.F) {
	f.Add("user", "s3cr3t", "127.0.0.1:6443")
	f.Add("user", `pa"ss`, "127.0.0.1:bad")
	f.Add("u@v", "a b", "[::1")
	f.Fuzz(func(t *testing.T, user, password, rest string) {
		host := "https://" + user + ":" + password + "@" + rest
		masked := "https://" + user + ":***@" + rest
		if len(password) < 4 || strings.ContainsAny(user+password, ":/?#") || strings.Contains(password, "@") ||
			strings.Contains(masked+strconv.Quote(masked)+" host must be a URL or a host:port pair: parse invalid server", password) {
			// A password the URL does not delimit as one, or one the
			// text around it shows anyway.
			return
		}
		var b strings.Builder
		w := redact.Writer{W: &b, Host: host}
		_, _ = fmt.Fprintf(w, "host must be a URL or a host:port pair: %q\n", host)
		_, _ = fmt.Fprintf(w, "parse %q: invalid\n", host)
		_, _ = fmt.Fprintf(w, "server %s\n", host)
		if strings.Contains(b.String(), password) {
			t.Fatalf("the password %q of %q shows in %q", password, host, b.String())
		}
	})
}
