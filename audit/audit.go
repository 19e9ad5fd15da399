package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/rule"
)

// ErrUnavailable is returned when a record cannot be accepted; callers must refuse the traffic
// the record describes rather than let it pass unrecorded.
var ErrUnavailable = errors.New("audit trail unavailable")

// Kind says what a record describes.
type Kind string

// Record kinds.
const (
	KindHTTP  Kind = "http"
	KindDNS   Kind = "dns"
	KindExec  Kind = "exec"
	KindLease Kind = "lease"
	KindFile  Kind = "file"
	// KindAudit is a record the trail writes about itself: a segment opened, a segment's index
	// sealed, a checkpoint signed, segments deleted by retention.
	KindAudit Kind = "audit"
)

// Event names what a record says happened, within its kind. The events each kind has are
// below, beside the packages' own (the pool's process and workspace events, approvals', the
// review page's marks).
type Event string

// Events of KindAudit records.
const (
	EventSegment    Event = "segment"    // the first record of every segment
	EventIndex      Event = "index"      // a sealed segment's index: its hash, under the chain (see seal.go)
	EventCheckpoint Event = "checkpoint" // Note holds the signed checkpoint of the record before it
	EventRetention  Event = "retention"  // every record up to Through was deleted; Reason says why
)

// Events of KindLease records: a lease's life, from its bind to the one event that ends it
// (EventEnded).
const (
	EventBind      Event = "bind"       // the lease began: its sandbox bound to the task's scopes
	EventRenew     Event = "renew"      // its expiry moved
	EventTokenSwap Event = "token-swap" // a new task token for the same task, whose scopes apply at once
	EventRelease   Event = "release"    // its tenant ended it
	EventExpiry    Event = "expiry"     // the reaper ended it at its expiry
	EventReap      Event = "reap"       // its sandbox was gone when the node restarted
	// A pause keeps the lease's state as a snapshot and ends its sandbox and binding, revoking
	// what was minted; the lease goes on, holding nothing, until a resume binds a new sandbox
	// under a new token (recorded with the scopes it grants), or its pause expires (EventExpiry).
	EventPause  Event = "pause"
	EventResume Event = "resume"
)

// EventEnded reports whether e is a lease event that ends the lease.
func EventEnded(e Event) bool { return e == EventRelease || e == EventExpiry || e == EventReap }

// Events of a tunnel's KindHTTP records: a connection the gateway relays without reading its
// requests is recorded when it opens (its decision) and when it closes (its bytes).
const (
	EventOpen  Event = "open"
	EventClose Event = "close"
)

// EventCut marks the KindHTTP record of a request (or its switched stream) that the gateway
// cut, or of a request or tunnel it refused at its last decision before sending, because its lease no longer allowed it
// (released, expired, a token swap took its scope away): a Deny under the rule that refuses it
// now, never a request the task asked for anew. When it was sent upstream before the cut, its
// Credential left the gateway and Scopes holds the one scope it was sent under (empty when it
// was not sent). A tunnel cut the same way keeps its EventClose, its Reason saying why.
const EventCut Event = "cut"

// EventGatewayLookup marks a KindDNS record of a lookup the gateway made itself (to dial an
// upstream), not a question the sandbox asked (whose Event is empty).
const EventGatewayLookup Event = "gateway-lookup"

// Decision is allow or deny.
type Decision string

// Decisions.
const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
)

// Record is one audit line. Rule is always a configured name, never free text, because it is also
// a metric label; Reason is the readable explanation. No field ever holds a secret value.
type Record struct {
	Time    time.Time `json:"time"`
	Kind    Kind      `json:"kind"`
	Node    string    `json:"node,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Lease   string    `json:"lease,omitempty"`
	Task    string    `json:"task,omitempty"`
	Sandbox string    `json:"sandbox,omitempty"`
	Source  string    `json:"source,omitempty"`
	// Reviewer is who acted when a person did (a review mark): the name of the reviewer key,
	// or "tenant:T" for a tenant's API key.
	Reviewer string    `json:"reviewer,omitempty"`
	Decision Decision  `json:"decision,omitempty"`
	Rule     rule.Rule `json:"rule,omitempty"`
	Reason   string    `json:"reason,omitempty"`

	// HTTP
	Method     string `json:"method,omitempty"`
	Host       string `json:"host,omitempty"`
	Port       int    `json:"port,omitempty"`
	Path       string `json:"path,omitempty"`
	Credential string `json:"credential,omitempty"` // the catalog name, never the value
	Status     int    `json:"status,omitempty"`
	BytesUp    int64  `json:"bytes_up,omitempty"`
	BytesDown  int64  `json:"bytes_down,omitempty"`
	Upstream   string `json:"upstream,omitempty"`
	// Dest is the address the sandbox connected to when it did not use the proxy and the
	// network redirected it to the gateway: the name above came from its TLS server name or
	// Host header.
	Dest string `json:"dest,omitempty"`
	// Mirror is the server the request went to instead of Host, when the operator maps Host to
	// a mirror (an internal copy of a public registry).
	Mirror string `json:"mirror,omitempty"`

	// DNS
	QName   string `json:"qname,omitempty"`
	QType   string `json:"qtype,omitempty"`
	Answers int    `json:"answers,omitempty"`
	// Flagged marks a decision a security reviewer should look at (a tunnel-shaped query).
	Flagged bool `json:"flagged,omitempty"`

	// Lease events: the sandbox's template and engine runtime, and the scopes the task token
	// grants (at bind and at each token swap).
	Template string   `json:"template,omitempty"`
	Runtime  string   `json:"runtime,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`

	// Exec and lease events
	Event    Event    `json:"event,omitempty"`
	Command  []string `json:"command,omitempty"`
	ExitCode *int     `json:"exit_code,omitempty"`
	Process  string   `json:"process,omitempty"` // a background process's id
	// What a command read and wrote: sizes, hashes and the first bytes of each stream.
	Stdin  *Stream `json:"stdin,omitempty"`
	Stdout *Stream `json:"stdout,omitempty"`
	Stderr *Stream `json:"stderr,omitempty"`

	// File transfers and operations: Path above is the sandbox path; To is where a move put it.
	// An index seal (EventIndex) carries the SHA-256 of the sealed segment's index here.
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	To     string `json:"to,omitempty"`

	DurationMS float64 `json:"duration_ms,omitempty"`

	// The trail's own records (KindAudit): the segment a record opens (for an index seal, the
	// segment whose index it seals); for retention, the last seq deleted and its hash (the prev
	// of the first record kept), for an index seal the last seq of the sealed segment and its
	// hash; for a checkpoint or an index seal, the signed note.
	Segment string `json:"segment,omitempty"`
	Through uint64 `json:"through,omitempty"`
	Head    string `json:"head,omitempty"`
	Note    string `json:"note,omitempty"`

	// Raw holds, base64-encoded, the exact bytes of every text field that is not valid UTF-8
	// (keyed by the field's JSON name, "command.N" for an argument). The field itself carries
	// the text with U+FFFD in place of each invalid byte, so any JSON reader can show it; Read
	// puts the exact bytes back. Filled by the encoder, never by callers.
	Raw map[string]string `json:"raw,omitempty"`

	// Hash chain, filled by the file sink.
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev,omitempty"`
	Hash string `json:"hash,omitempty"`
}

// Stream describes one standard stream of a command: how many bytes passed, their SHA-256, and
// the first of them (up to the node's audit.output_head, through the one redaction step).
type Stream struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Head   string `json:"head,omitempty"`
}

// Sink accepts records. Write must not block on I/O for long: it either accepts the record for a
// durable write or returns an error wrapping ErrUnavailable.
//
// A sink may have optional capabilities, each an interface of this package (Checker,
// Checkpointer, Unwrapper); a sink that passes records on to another implements Unwrapper, so
// that what the caller asks through Check reaches the sink that can answer.
type Sink interface {
	Write(ctx context.Context, r Record) error
}

// Discard is a Sink for tests of other packages that do not look at records.
type Discard struct{}

var _ Sink = Discard{}

// Write accepts and drops r.
func (Discard) Write(context.Context, Record) error { return nil }

// Checker is met by sinks that can tell ahead of time that a write would fail, so callers can
// refuse traffic before it passes rather than after. Err returns nil when a Write would be
// accepted now, else why not (wrapping ErrUnavailable). It must be cheap and safe for concurrent
// use: the gateway and the resolver ask it before every decision. Ask it through Check.
type Checker interface {
	Err() error
}

// Unwrapper is met by a sink that writes its records to another (a tee, a filter, a recorder):
// Unwrap returns that sink, so that Check asks it when the wrapper is no Checker itself.
type Unwrapper interface {
	Unwrap() Sink
}

// Check reports why a Write to s would fail now, or nil: the answer of s when it is a Checker,
// else that of the sink it wraps (Unwrapper), else nil, for a sink that cannot tell ahead.
// Callers that refuse what the trail could not record ask Check rather than asserting Checker
// on s themselves, so that wrapping the sink never silently turns their refusal off.
// A chain of wrappers deeper than maxWrapped (one that wraps itself, say) is refused as a trail
// that cannot tell.
func Check(s Sink) error {
	for range maxWrapped {
		if c, ok := s.(Checker); ok {
			return c.Err()
		}
		u, ok := s.(Unwrapper)
		if !ok {
			return nil
		}
		if s = u.Unwrap(); s == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: the sink wraps others more than %d deep", ErrUnavailable, maxWrapped)
}

// maxWrapped bounds the sinks Check unwraps.
const maxWrapped = 16
