//go:build tools

// Package tools pins gVisor's containerd shim (containerd-shim-runsc-v1), at the gVisor
// version tools/runsc builds, for the test cluster's gvisor RuntimeClass.
package tools

import _ "gvisor.dev/gvisor/shim"
