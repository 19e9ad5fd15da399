package inside

// ShippedImages are the sandbox images that ship with airlock, each tagged airlock/NAME:latest:
// the default and the python and node toolchains. They are named here, beside what every
// sandbox is given, rather than in the backend that builds them (the Docker backend's
// ImageScript), so that the configuration can refuse a built template that would overwrite
// one without linking a backend. Callers must not modify the slice.
var ShippedImages = []string{"default", "python", "node"}
