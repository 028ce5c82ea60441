package redact_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/kubewire/kubewire/internal/redact"
)

func TestString(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{"http://user:s3cr3t@127.0.0.1:8001", "http://user:***@127.0.0.1:8001"},
		{"https://user:s3cr3t@example.test/api?x=1", "https://user:***@example.test/api?x=1"},
		{"https://user@example.test", "https://user@example.test"},
		{"https://example.test/p@th", "https://example.test/p@th"},
		{"user:s3cr3t@127.0.0.1:8001", "***@127.0.0.1:8001"},
		{"http://us%2Fer:s3cr3t@h", "http://us/er:***@h"},
		{"http://user:s3cr3t@[::1", "http://***@[::1"},
		{"127.0.0.1:6443", "127.0.0.1:6443"},
		{"", ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			assert.Equal(t, tt.want, redact.String(tt.give))
		})
	}
	assert.Equal(t, "", redact.URL(nil))
}

// FuzzString: whatever the input, a password the URL parser finds in it
// does not come out with its userinfo.
func FuzzString(f *testing.F) {
	for _, s := range []string{"http://u:p@h", "u:p@h:1", "https://h/x@y", "http://u:p@[::1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := redact.String(s)
		u, err := url.Parse(s)
		if err != nil || u.User == nil {
			return
		}
		if p, ok := u.User.Password(); ok && p != "***" && strings.Contains(out, u.User.String()+"@") {
			t.Fatalf("String(%q) = %q keeps the userinfo %q", s, out, u.User.String())
		}
	})
}
