//go:build tools

// Package tools records the program this module exists to build, so that
// `go mod tidy` keeps its dependencies in go.mod and go.sum. It is never
// compiled; hack/build-helm.sh runs `go build` on this path.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
