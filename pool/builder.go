package pool

import (
	"context"
	"io"
)

// ImageBuilder is a Backend that can build a template's image itself (Docker builds one made
// from a Dockerfile or a devcontainer.json on its engine): at start the node builds, through
// it, the images its templates lack. A Backend without it runs images made elsewhere
// (Kubernetes pulls them).
type ImageBuilder interface {
	// BuildMissing builds t's image when t is built (Template.Built) and the backend lacks it,
	// writing the build's progress to w; it reports whether it built.
	BuildMissing(ctx context.Context, t Template, w io.Writer) (bool, error)
}
