package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRunBadFlags(t *testing.T) {
	var errOut strings.Builder
	assert.Equal(t, 2, run(context.Background(), []string{"-nope"}, &errOut))
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-namespace", "Bad_NS"}, &errOut))
	assert.Contains(t, errOut.String(), `driver: namespace "Bad_NS" is not a valid namespace name`)
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-period", "200ms"}, &errOut))
	assert.Contains(t, errOut.String(), "reconciler: WithPeriod must be at least 1s, got 200ms")
	errOut.Reset()
	assert.Equal(t, 2, run(context.Background(), []string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-replicas", "2", "-lease-name", "Bad_Name"}, &errOut))
	assert.Contains(t, errOut.String(), `reconciler: WithLeaderElection Name "Bad_Name" is not a valid object name`)
	for _, tt := range []struct {
		give []string
		want string
	}{
		{[]string{"-shutdown-grace", "0s"}, "gateway: -shutdown-grace must be positive, got 0s"},
		{[]string{"-read-timeout", "0s"}, "gateway: -read-timeout must be positive, got 0s"},
		{[]string{"-request-timeout", "-1s"}, "gateway: -request-timeout must be positive, got -1s"},
		{[]string{"-write-timeout", "0s"}, "gateway: -write-timeout must be positive, got 0s"},
		{[]string{"-idle-timeout", "-5m"}, "gateway: -idle-timeout must be positive, got -5m0s"},
		{[]string{"-api-timeout", "0s"}, "gateway: -api-timeout must be positive, got 0s"},
		{[]string{"-api-timeout", "-5s"}, "gateway: -api-timeout must be positive, got -5s"},
		{[]string{"-api-ping-after", "2s"}, "gateway: -api-ping-after 2s and -api-ping-timeout 0s go together, both positive"},
		{[]string{"-api-ping-timeout", "2s"}, "gateway: -api-ping-after 0s and -api-ping-timeout 2s go together, both positive"},
		{[]string{"-api-ping-after", "-1s", "-api-ping-timeout", "2s"}, "gateway: -api-ping-after -1s and -api-ping-timeout 2s go together, both positive"},
		{[]string{"-api-ping-after", "2s", "-api-ping-timeout", "-2s"}, "gateway: -api-ping-after 2s and -api-ping-timeout -2s go together, both positive"},
		{[]string{"-request-timeout", "1m"}, "gateway: -request-timeout 1m0s must be less than -write-timeout 1m0s"},
		{[]string{"-write-timeout", "10s"}, "gateway: -read-timeout 30s must be less than -write-timeout 10s"},
		{[]string{"-write-timeout", "40s"}, "gateway: -request-timeout 50s must be less than -write-timeout 40s"},
		{[]string{"-read-timeout", "2s", "-request-timeout", "500ms", "-write-timeout", "1s"}, "gateway: -read-timeout 2s must be less than -write-timeout 1s"},
		{[]string{"-read-timeout", "1s", "-request-timeout", "500ms", "-write-timeout", "1s"}, "gateway: -read-timeout 1s must be less than -write-timeout 1s"},
	} {
		errOut.Reset()
		assert.Equal(t, 2, run(context.Background(), tt.give, &errOut), "%v", tt.give)
		assert.Contains(t, errOut.String(), tt.want, "%v", tt.give)
	}
}

// TestRunRefusesOpenListen: a -listen address other than loopback without
// TLS and authentication is refused, naming the risk and the flag that
// takes it, before anything is served.
func TestRunRefusesOpenListen(t *testing.T) {
	for _, tt := range []struct {
		give []string
		want string // "" for no refusal of the listen address
	}{
		{[]string{"-listen", "0.0.0.0:0"}, "gateway: -listen 0.0.0.0:0 is not a loopback address: serve it with -tls-cert-file, -tls-key-file and -authenticate, or say -insecure-listen"},
		{[]string{"-listen", "[::]:0"}, "gateway: -listen [::]:0 is not a loopback address"},
		{[]string{"-listen", ":8080", "-tls-cert-file", "c.pem", "-tls-key-file", "k.pem", "-authenticate=false"}, "gateway: -listen :8080 is not a loopback address"},
		{[]string{"-listen", "gateway.example:8443", "-tls-cert-file", "c.pem", "-tls-key-file", "k.pem", "-authenticate=false"}, "gateway: -listen gateway.example:8443 is not a loopback address"},
		{[]string{"-tls-cert-file", "c.pem"}, `gateway: -tls-cert-file "c.pem" and -tls-key-file "" go together`},
		{[]string{"-listen", "nope"}, `gateway: -listen "nope": address nope: missing port in address`},
		{[]string{"-listen", ":0", "-tls-cert-file", "c.pem", "-tls-key-file", "k.pem"}, ""},
		{[]string{"-listen", ":0", "-insecure-listen"}, ""},
		{[]string{"-listen", "127.0.0.1:0", "-authenticate=false"}, ""},
	} {
		var errOut strings.Builder
		// A bad namespace: run gets past the listen check, then stops.
		code := run(context.Background(), append([]string{"-kubeconfig", "../restconfig/testdata/unreachable.yaml", "-namespace", "Bad_NS"}, tt.give...), &errOut)
		if tt.want == "" {
			assert.Contains(t, errOut.String(), `namespace "Bad_NS" is not a valid namespace name`, "%v", tt.give)
			continue
		}
		assert.Equal(t, 2, code, "%v", tt.give)
		assert.Contains(t, errOut.String(), tt.want, "%v", tt.give)
	}
}
