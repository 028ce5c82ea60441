package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/test/kubetest"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, &env)
}

func TestRunAgainstAPIServer(t *testing.T) {
	cfg := env.Config(t)
	path := kubetest.WriteKubeconfig(t, cfg)

	var out, errOut strings.Builder
	code := run(context.Background(), []string{"-kubeconfig", path, "-v"}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	assert.Contains(t, out.String(), "server v1.37.2")
	assert.Contains(t, out.String(), "namespace default")
	assert.Contains(t, errOut.String(), "request attempt", "verbose logs show the connection facts")
	assert.NotContains(t, errOut.String(), string(cfg.KeyData[40:80]), "no key material in logs")
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad flag", []string{"-nope"}, 2, "flag provided but not defined: -nope"},
		{"bad timeout", []string{"-kubeconfig", "testdata/unreachable.yaml", "-timeout", "0s"}, 2, "kubeadapter: WithTimeout must be positive, got 0s"},
		{"missing kubeconfig", []string{"-kubeconfig", "testdata/none.yaml"}, 1, "restconfig: loading kubeconfig:"},
		{"unreachable", []string{"-kubeconfig", "testdata/unreachable.yaml", "-timeout", "2s"}, 1, "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut strings.Builder
			code := run(context.Background(), tt.args, &out, &errOut)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, errOut.String(), tt.want)
			assert.NotContains(t, errOut.String(), "goroutine ", "no stack trace")
		})
	}
}
