package apitype

import "time"

// SnapshotRequest is the body of POST /v1/leases/{id}/snapshots: a snapshot of the lease's
// workspace, and of the template's declared writable paths named in Paths (none unless asked).
type SnapshotRequest struct {
	Name  string   `json:"name,omitempty"`
	Paths []string `json:"paths,omitempty"`
}

// SnapshotView is a snapshot as the API shows it. ID is content-addressed: "sha256:" and the
// hex SHA-256 of the archive it holds (the same workspace gives the same ID).
type SnapshotView struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Tenant   string `json:"tenant"`
	Template string `json:"template"`
	// Image is the digest of the image the sandbox ran; a lease from the snapshot runs it.
	Image   string    `json:"image"`
	Lease   string    `json:"lease"`
	Created time.Time `json:"created"`
	// Size is the archive's size, Stored what the store holds (encrypted), Files its entries.
	Size   int64    `json:"size"`
	Stored int64    `json:"stored"`
	Files  int      `json:"files"`
	Paths  []string `json:"paths"`
	// Took is how long taking it took (milliseconds), on the answer of the call that took it.
	TookMS int64 `json:"took_ms,omitempty"`
}

// Restored is how a lease's workspace was restored from a snapshot (LeaseView.Restored).
type Restored struct {
	Snapshot string `json:"snapshot"`
	Files    int    `json:"files"`
	Size     int64  `json:"size"`
	TookMS   int64  `json:"took_ms"`
	// Kept is what came back: files, or memory and files (the answer of a resume of a lease
	// paused with its memory).
	Kept Kept `json:"kept,omitempty"`
}

// PauseRequest is the body of POST /v1/leases/{id}/pause.
type PauseRequest struct {
	// Memory asks to keep running processes too where the runtime can (gVisor's checkpoint);
	// where it cannot the pause keeps the files and says so in Kept.
	Memory bool `json:"memory,omitempty"`
	// Keep asks that, should the lease stay paused past its template's max_paused, its state
	// become a snapshot ("paused-LEASE") instead of being deleted with it.
	Keep bool `json:"keep,omitempty"`
}

// Kept says what a pause kept.
type Kept string

const (
	KeptFiles  Kept = "files"        // the workspace and declared paths; processes are gone
	KeptMemory Kept = "memory+files" // running processes too (a checkpoint of the sandbox)
)

// PauseView is the answer to a pause, and a paused lease in a listing.
type PauseView struct {
	Lease    string    `json:"lease"`
	Task     string    `json:"task"`
	Template string    `json:"template"`
	Kept     Kept      `json:"kept"`
	Snapshot string    `json:"snapshot"`
	Paused   time.Time `json:"paused"`
	// Until is when the paused lease is released if not resumed (template max_paused).
	Until  time.Time `json:"until"`
	TookMS int64     `json:"took_ms,omitempty"`
	// Why says why memory was not kept when it was asked for.
	Why string `json:"why,omitempty"`
	// Keep: the state becomes a snapshot if the lease expires paused.
	Keep bool `json:"keep,omitempty"`
}

// ResumeRequest is the body of POST /v1/leases/{id}/resume: a task token for the lease's task
// (of the same tenant and task id; its scopes may differ), since a paused lease holds none; or,
// on a node that mints tokens, an allow list as a lease takes, minted for the lease's task.
type ResumeRequest struct {
	Token string   `json:"token,omitempty"`
	Allow []string `json:"allow,omitempty"`
	TTL   string   `json:"ttl,omitempty"`
}
