//go:build tools

// Package tools pins the commands this module builds, so that `go mod tidy` keeps their dependencies:
// kube-apiserver, and etcd's server (the same go.etcd.io/etcd/server/v3 release kube-apiserver links).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
