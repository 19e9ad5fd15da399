package docker

import (
	_ "embed"
)

// ImageScript builds a shipped sandbox image: a minimal Debian root made with debootstrap, the
// toolchain's Debian packages installed in it, imported with `docker import` (no registry is
// needed). It is a bash script, run by `airlock image build`, whose first argument is one of
// inside.ShippedImages; AIRLOCK_CACHE names its cache folder.
//
//go:embed sandbox-image.sh
var ImageScript string

// DefaultImage is the image the default template runs.
const DefaultImage = "airlock/default:latest"
