//go:build tools

// Package tools pins Kueue's controller manager for the test bed's MultiKueue peer;
// `go mod tidy` keeps its dependency closure in go.mod/go.sum. Nothing imports it.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
