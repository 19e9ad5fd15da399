//go:build tools

// Package tools pins the Kubernetes components the test cluster runs: the control plane, the
// kubelet and kubectl at one release, built from the Go module proxy like Vault and gVisor.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
