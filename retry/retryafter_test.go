package retry_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/kubewire/kubewire/retry"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		give   string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"86400", 24 * time.Hour, true},
		{"86401", 24 * time.Hour, true},
		{"99999999999999999999999", 24 * time.Hour, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{"Sun, 29 Nov 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Sunday, 29-Nov-26 12:01:00 GMT", time.Minute, true},
		{"Sun Nov 29 12:00:05 2026", 5 * time.Second, true},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0, true},
		{"Mon, 29 Nov 2027 12:00:00 GMT", 24 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, ok := retry.ParseRetryAfter(tt.give, now)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "5", "120", "-3", "1e3", "99999999999999999999", "Sun, 06 Nov 1994 08:49:37 GMT", "Sun, 29 Nov 2026 12:00:30 GMT", now.Format(http.TimeFormat)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retry.ParseRetryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %v, false: a rejected value must be zero", v, d)
			}
			return
		}
		if d < 0 || d > 24*time.Hour {
			t.Fatalf("ParseRetryAfter(%q) = %v, outside [0, 24h]", v, d)
		}
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && n <= 86400 && d != time.Duration(n)*time.Second {
			t.Fatalf("ParseRetryAfter(%q) = %v, want %ds", v, d, n)
		}
	})
}
