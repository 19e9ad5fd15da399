//go:build tools

// Package tools pins etcd, the test cluster's store, built from the Go module proxy.
package tools

import _ "go.etcd.io/etcd/server/v3"
