package docker

import (
	_ "embed"
)

// ImageScript builds the default sandbox image: a minimal Debian root made with debootstrap and
// imported with `docker import` (no registry is needed). It is a bash script, run by
// `airlock image build`; AIRLOCK_CACHE names its cache folder.
//
//go:embed sandbox-image.sh
var ImageScript string

// DefaultImage is the image the default template runs.
const DefaultImage = "airlock/default:latest"
