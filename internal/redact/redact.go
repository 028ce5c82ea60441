// Package redact masks the password in a URL before it is printed, logged
// or put in an error, as net/http does for the URL in its *url.Error
// ("user:***@host").
package redact

import (
	"net/url"
	"strings"
)

// URL returns u as a string with its password, if any, masked.
func URL(u *url.URL) string {
	if u == nil {
		return ""
	}
	if _, ok := u.User.Password(); ok {
		// net/http's stripPassword, for its *url.Error.
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// String masks the password in s, a URL or a bare host[:port] as
// rest.Config.Host may hold it. What does not parse as a URL with a scheme
// has everything before its last '@' masked.
func String(s string) string {
	if u, err := url.Parse(s); err == nil && strings.Contains(s, "://") {
		return URL(u)
	}
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return s[:start] + "***@" + s[at+1:]
}
