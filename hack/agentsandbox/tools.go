//go:build tools

// Package tools pins the agent-sandbox release whose controller the driver
// tests run as a process: v0.4.6, the last release that serves v1alpha1
// only. The controller of the release in the main go.mod runs in-process.
package tools

import (
	_ "sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller"
)
