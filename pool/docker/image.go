package docker

import (
	_ "embed"
)

// ImageScript builds a shipped sandbox image: a minimal Debian root made with debootstrap, the
// toolchain's Debian packages installed in it, imported with `docker import` (no registry is
// needed). It is a bash script, run by `airlock image build`, whose first argument is one of
// ShippedImages; AIRLOCK_CACHE names its cache folder.
//
//go:embed sandbox-image.sh
var ImageScript string

// ShippedImages are the images ImageScript builds, each tagged airlock/NAME:latest.
var ShippedImages = []string{"default", "python", "node"}

// DefaultImage is the image the default template runs.
const DefaultImage = "airlock/default:latest"
