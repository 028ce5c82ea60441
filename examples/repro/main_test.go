package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRun runs the README's first command as a user would see it.
func TestRun(t *testing.T) {
	var out strings.Builder
	code := run(&out, 2*time.Second, 300*time.Millisecond)
	assert.Equal(t, 0, code, out.String())
	for _, want := range []string{"HTTP/1.1", "HTTP/2", "FAIL", "x2", "on connection reused after", "i/o timeout", "as predicted"} {
		assert.Contains(t, out.String(), want)
	}
	assert.NotContains(t, out.String(), "unexpected")
}
