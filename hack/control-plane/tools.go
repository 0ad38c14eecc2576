//go:build tools

// Package tools records the programs this module exists to build, so that
// `go mod tidy` keeps their dependencies in go.mod and go.sum. It is never
// compiled; hack/build-control-plane.sh runs `go build` on these paths.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
