package apitype

import "time"

// LeaseRequest is the body of POST /v1/leases.
type LeaseRequest struct {
	Template string   `json:"template"`
	Token    string   `json:"token,omitempty"`
	Allow    []string `json:"allow,omitempty"`
	TTL      string   `json:"ttl,omitempty"`
	// Env is set for every command of the lease; no variable may carry a secret (pool.CheckEnv).
	Env map[string]string `json:"env,omitempty"`
	// Metadata is the tenant's labels, shown with the lease and never given to the sandbox.
	Metadata map[string]string `json:"metadata,omitempty"`
	// From is a snapshot of the tenant's ("sha256:..." or its name) whose workspace the lease
	// starts with, restored before the lease is returned.
	From string `json:"from,omitempty"`
	// NoCaches starts the lease with the template's caches empty.
	NoCaches bool `json:"no_caches,omitempty"`
	// WriteCaches writes the template's caches back when the lease ends (released or
	// expired, not paused), for the tenant's next leases of the template: what this lease
	// leaves there, they run. Refused for a template that keeps no cache per tenant.
	WriteCaches bool `json:"write_caches,omitempty"`
}

// LeaseView is a lease as the API shows it; the task token is never returned.
type LeaseView struct {
	ID       string            `json:"id"`
	Template string            `json:"template"`
	Task     string            `json:"task"`
	Tenant   string            `json:"tenant,omitempty"`
	Node     string            `json:"node"`
	Sandbox  string            `json:"sandbox"`
	Address  string            `json:"address"`
	Created  time.Time         `json:"created"`
	Expires  time.Time         `json:"expires"`
	Start    Start             `json:"start,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// State is "running" or "paused" (a paused lease holds no sandbox and no binding).
	State string `json:"state,omitempty"`
	// Restored is set on the answer of a lease from a snapshot, and of a resume.
	Restored *Restored `json:"restored,omitempty"`
	// Pause is what a paused lease's pause kept, and until when (state "paused").
	Pause *PauseView `json:"pause,omitempty"`
}

// Start is how a lease's sandbox was had.
type Start string

const (
	StartWarm   Start = "warm"   // a warm one was claimed
	StartWaited Start = "waited" // none was warm, and the refill made one for the lease in time
	StartCold   Start = "cold"   // one was started for the lease
)

// RenewRequest is the body of POST /v1/leases/{id}/renew.
type RenewRequest struct {
	TTL string `json:"ttl,omitempty"`
}

// TokenRequest is the body of PUT /v1/leases/{id}/token.
type TokenRequest struct {
	Token string `json:"token"`
}

// PortRequest is the body of POST /v1/leases/{id}/ports.
type PortRequest struct {
	Port int `json:"port"`
}

// PortView is an exposed sandbox port: a URL, on a listener of its own, that carries a one-time
// capability; the first visit trades it for a cookie scoped to that listener.
type PortView struct {
	Lease string `json:"lease"`
	Port  int    `json:"port"`
	URL   string `json:"url"`
}

// ExplainRequest is the body of POST /v1/explain: a task token, or a lease of the caller's
// whose token is explained.
type ExplainRequest struct {
	Token  string `json:"token,omitempty"`
	Lease  string `json:"lease,omitempty"`
	Method string `json:"method,omitempty"`
	URL    string `json:"url"`
}

// AnswerRequest is the body of POST /v1/approvals/{id}: approve (for "once", the default, or
// for the "lease"), or deny with a reason.
type AnswerRequest struct {
	Decision string `json:"decision"`
	For      string `json:"for,omitempty"`
	Reason   string `json:"reason,omitempty"`
}
