// Package apitype holds the node API's requests and answers, as the server and its clients
// both read them. It is a leaf: it imports the standard library only, so a client links no
// part of the server.
package apitype

import "time"

// ProcessInfo describes a background process of a lease.
type ProcessInfo struct {
	ID       string     `json:"id"`
	Cmd      []string   `json:"cmd"`
	Started  time.Time  `json:"started"`
	Running  bool       `json:"running"`
	ExitCode *int       `json:"exit_code,omitempty"`
	Error    string     `json:"error,omitempty"` // why it ended other than by exiting (a timeout, a failure to start)
	Ended    *time.Time `json:"ended,omitempty"`
	// StdoutBytes and StderrBytes are how much each stream has written in all.
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	Workdir     string `json:"workdir,omitempty"`
	// TTY says it runs on a terminal (its output all on stdout); Stdin that it takes input
	// (ProcessInput) until that is closed.
	TTY   bool `json:"tty,omitempty"`
	Stdin bool `json:"stdin,omitempty"`
	// Resumed says it came back with its lease's resume from a pause that kept memory: it is
	// listed, signalled and ended with the lease as before, but its output from then on is not
	// followed, and its exit code is not known (Ended says when it was found gone).
	Resumed bool `json:"resumed,omitempty"`
}

// FileInfo describes a transferred file.
type FileInfo struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	To     string `json:"to,omitempty"` // where a move put it
}

// Entry is a file or folder in a lease's workspace.
type Entry struct {
	Path  string    `json:"path"`
	Name  string    `json:"name"`
	Type  string    `json:"type"` // file, dir, symlink or other
	Size  int64     `json:"size"`
	Mode  string    `json:"mode"` // permission bits in octal: "0644"
	MTime time.Time `json:"mtime"`
	Link  string    `json:"link,omitempty"` // a symlink's target
}

// TermSize is a terminal's size in character cells.
type TermSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// PoolStatus is one template's pool on this node.
type PoolStatus struct {
	Template string `json:"template"`
	Node     string `json:"node"`
	Warm     int    `json:"warm"`
	Leased   int    `json:"leased"`
	MinWarm  int    `json:"min_warm"`
	MaxTotal int    `json:"max_total"`
	// MaxWarm is the ceiling of the warm target; Target is how many warm sandboxes the pool
	// aims at now (between MinWarm and MaxWarm, following LeaseRate, leases per second over
	// the last minute, times CreateSeconds, the recent time to create and check one, and
	// growing at once when leases wait). Creating is how many are being made; Waiting how many
	// leases wait for one.
	MaxWarm       int     `json:"max_warm"`
	Target        int     `json:"target"`
	Creating      int     `json:"creating"`
	Waiting       int     `json:"waiting"`
	LeaseRate     float64 `json:"lease_rate"`
	CreateSeconds float64 `json:"create_seconds"`
	// Refills counts the passes of this pool's refill that have ended since the node started
	// (one each second, and at every lease and release): each compares the counts with the
	// target and makes, or destroys, what it calls for. Passes run one at a time, so the second
	// to end after a moment began after it.
	Refills  uint64 `json:"refills"`
	Runtime  string `json:"runtime"`            // the OCI runtime its sandboxes run under: runc, runsc
	Platform string `json:"platform,omitempty"` // gVisor's platform under runsc: systrap, ptrace, kvm
	// Image is the image id new sandboxes are made from; ImageError says why there is none
	// (missing, or failing the hardening checks).
	Image      string `json:"image,omitempty"`
	ImageError string `json:"image_error,omitempty"`
}

// RuntimeName is the runtime with its platform, when it has one: "runc", "runsc/systrap".
func (p PoolStatus) RuntimeName() string {
	if p.Platform == "" {
		return p.Runtime
	}
	return p.Runtime + "/" + p.Platform
}
