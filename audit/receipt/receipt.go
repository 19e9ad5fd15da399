// Package receipt builds a lease's receipt from its records in the audit trail: a signed summary
// that answers, offline, what the lease was granted and what it did.
package receipt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/airlock-dev/airlock/audit"
)

// Receipt is one lease's summary. Every list is sorted, so two receipts of the same records are
// byte for byte the same.
type Receipt struct {
	Version  int    `json:"version"`
	Node     string `json:"node"`
	Lease    string `json:"lease"`
	Tenant   string `json:"tenant"`
	Task     string `json:"task"`
	Sandbox  string `json:"sandbox,omitempty"`
	Template string `json:"template,omitempty"`
	Runtime  string `json:"runtime,omitempty"`
	// Started is the bind; Ended the lease's end, and EndedBy how (release, expiry); both
	// empty for a lease that still runs.
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	EndedBy string     `json:"ended_by,omitempty"`
	// ScopesGranted are the token's scopes (at bind and each token swap); ScopesUsed the ones
	// that allowed a request.
	ScopesGranted []string      `json:"scopes_granted"`
	ScopesUsed    []string      `json:"scopes_used"`
	Destinations  []Destination `json:"destinations"`
	// Credentials are the catalog names injected into the lease's requests, never values.
	Credentials []string `json:"credentials"`
	Denials     []Denial `json:"denials"`
	// DNSUnused are names the sandbox had resolved and then never connected to.
	DNSUnused []string  `json:"dns_unused"`
	Commands  []Command `json:"commands"`
	Files     []File    `json:"files"`
	// Workspace is the summary written when the lease ended (what changed, and whether the
	// workspace was read whole).
	Workspace string `json:"workspace,omitempty"`
	// NotListed counts, per list, the entries beyond MaxListed that are counted in Records
	// and not listed (a sandbox asking for a million names must not make a receipt that size).
	NotListed map[string]int `json:"not_listed,omitempty"`
	Records   Records        `json:"records"`
	// Checkpoint is the node's signed checkpoint over a head at or after the last record: with
	// the trail, it proves the records summarised are the ones written.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Destination is one host and port the lease's requests went to.
type Destination struct {
	Host        string   `json:"host"`
	Port        int      `json:"port,omitempty"`
	Allowed     int      `json:"allowed"`
	Denied      int      `json:"denied"`
	BytesUp     int64    `json:"bytes_up"`
	BytesDown   int64    `json:"bytes_down"`
	Credentials []string `json:"credentials,omitempty"`
}

// Denial is one rule's refusals of one host (or DNS name).
type Denial struct {
	Kind   string `json:"kind"`
	Rule   string `json:"rule"`
	Host   string `json:"host,omitempty"`
	Count  int    `json:"count"`
	Reason string `json:"reason"` // the first one's
}

// Command is one command that ran (a background process: its exit).
type Command struct {
	Seq      uint64        `json:"seq"`
	Command  []string      `json:"command"`
	Process  string        `json:"process,omitempty"`
	ExitCode *int          `json:"exit_code,omitempty"`
	Error    string        `json:"error,omitempty"`
	Stdin    *audit.Stream `json:"stdin,omitempty"`
	Stdout   *audit.Stream `json:"stdout,omitempty"`
	Stderr   *audit.Stream `json:"stderr,omitempty"`
}

// File is one transfer or workspace change.
type File struct {
	Seq    uint64 `json:"seq"`
	Event  string `json:"event"`
	Path   string `json:"path"`
	To     string `json:"to,omitempty"`
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Denied bool   `json:"denied,omitempty"`
}

// Records says which records the receipt summarises.
type Records struct {
	Count int    `json:"count"`
	First uint64 `json:"first_seq"`
	Last  uint64 `json:"last_seq"`
}

// MaxListed bounds each list of a receipt (and what building it holds in memory); what is beyond
// is counted in NotListed.
const MaxListed = 10000

// Builder accumulates a lease's records, oldest first.
type Builder struct {
	r        Receipt
	granted  map[string]bool
	used     map[string]bool
	dests    map[string]*Destination
	creds    map[string]bool
	denials  map[string]*Denial
	resolved map[string]bool
	hosts    map[string]bool
}

// NewBuilder starts a receipt.
func NewBuilder() *Builder {
	return &Builder{r: Receipt{Version: 1}, granted: map[string]bool{}, used: map[string]bool{}, dests: map[string]*Destination{},
		creds: map[string]bool{}, denials: map[string]*Denial{}, resolved: map[string]bool{}, hosts: map[string]bool{}}
}

// Add takes in one of the lease's records.
func (b *Builder) Add(rec audit.Record) {
	r := &b.r
	if r.Records.Count == 0 {
		r.Records.First, r.Node, r.Lease, r.Tenant, r.Task = rec.Seq, rec.Node, rec.Lease, rec.Tenant, rec.Task
	}
	r.Records.Count++
	r.Records.Last = rec.Seq
	if r.Sandbox == "" {
		r.Sandbox = rec.Sandbox
	}
	switch rec.Kind {
	case audit.KindLease:
		b.lease(rec)
	case audit.KindHTTP:
		b.http(rec)
	case audit.KindDNS:
		host := strings.TrimSuffix(strings.ToLower(rec.QName), ".")
		switch {
		case rec.Decision == audit.Deny:
			b.deny(rec, host)
		case rec.Event == "": // the sandbox's own question, not the gateway's lookup
			if b.room("dns_unused", len(b.resolved)) {
				b.resolved[host] = true
			}
		}
	case audit.KindExec:
		if (rec.Event == "" || rec.Event == "process-exit") && b.room("commands", len(r.Commands)) {
			r.Commands = append(r.Commands, Command{Seq: rec.Seq, Command: rec.Command, Process: rec.Process, ExitCode: rec.ExitCode,
				Error: rec.Reason, Stdin: rec.Stdin, Stdout: rec.Stdout, Stderr: rec.Stderr})
		}
	case audit.KindFile:
		if rec.Event == "workspace" {
			r.Workspace = rec.Reason
		} else if b.room("files", len(r.Files)) {
			r.Files = append(r.Files, File{Seq: rec.Seq, Event: string(rec.Event), Path: rec.Path, To: rec.To, Size: rec.Size, SHA256: rec.SHA256,
				Denied: rec.Decision == audit.Deny})
		}
	}
}

// room reports whether a list holding n entries may take one more, counting the refusal.
func (b *Builder) room(list string, n int) bool {
	if n < MaxListed {
		return true
	}
	if b.r.NotListed == nil {
		b.r.NotListed = map[string]int{}
	}
	b.r.NotListed[list]++
	return false
}

func (b *Builder) lease(rec audit.Record) {
	r := &b.r
	switch rec.Event {
	case audit.EventBind:
		t := rec.Time
		r.Started, r.Template, r.Runtime = &t, rec.Template, rec.Runtime
		fallthrough
	case audit.EventTokenSwap, audit.EventResume:
		for _, s := range rec.Scopes {
			b.granted[s] = true
		}
	case audit.EventRelease, audit.EventExpiry, audit.EventReap:
		t := rec.Time
		r.Ended, r.EndedBy = &t, string(rec.Event)
	}
}

func (b *Builder) http(rec audit.Record) {
	host := strings.ToLower(rec.Host)
	if len(b.hosts) < MaxListed*4 {
		b.hosts[host] = true
	}
	key := fmt.Sprintf("%s:%d", host, rec.Port)
	d := b.dests[key]
	if d == nil {
		if !b.room("destinations", len(b.dests)) {
			if rec.Decision == audit.Deny {
				b.deny(rec, host)
			}
			return
		}
		d = &Destination{Host: host, Port: rec.Port}
		b.dests[key] = d
	}
	d.BytesUp += rec.BytesUp
	d.BytesDown += rec.BytesDown
	if rec.Event == audit.EventClose { // a tunnel's end: its bytes, its decision counted when it opened
		return
	}
	if rec.Decision == audit.Deny {
		d.Denied++
		b.deny(rec, host)
		if sentBeforeCut(rec) {
			// Refused in the end, yet it went upstream first, and its credential with it.
			if len(rec.Scopes) > 0 {
				b.used[rec.Scopes[0]] = true
			}
			b.credential(d, rec.Credential)
		}
		return
	}
	d.Allowed++
	if s, ok := strings.CutPrefix(rec.Reason, "scope "); ok {
		s, _, _ = strings.Cut(s, "; ") // what the request did beyond its scope follows (a git push's refs)
		b.used[s] = true
	}
	b.credential(d, rec.Credential)
}

// sentBeforeCut reports whether rec is the record of a request the gateway cut after sending it
// upstream (audit.EventCut naming the scope it was sent under; for a record written before
// EventCut, a cut request with an upstream connection, which may have been sent).
func sentBeforeCut(rec audit.Record) bool {
	if rec.Event == audit.EventCut {
		return len(rec.Scopes) > 0
	}
	return rec.Event == "" && rec.Upstream != "" && strings.HasPrefix(rec.Reason, "cut by the recheck: ")
}

// credential lists name ("" for none) as injected into a request to d.
func (b *Builder) credential(d *Destination, name string) {
	if name == "" {
		return
	}
	b.creds[name] = true
	if !slices.Contains(d.Credentials, name) {
		d.Credentials = append(d.Credentials, name)
		slices.Sort(d.Credentials)
	}
}

func (b *Builder) deny(rec audit.Record, host string) {
	key := string(rec.Kind) + "\x00" + string(rec.Rule) + "\x00" + host
	d := b.denials[key]
	if d == nil {
		if !b.room("denials", len(b.denials)) {
			return
		}
		d = &Denial{Kind: string(rec.Kind), Rule: string(rec.Rule), Host: host, Reason: rec.Reason}
		b.denials[key] = d
	}
	d.Count++
}

// Receipt returns what was added, its lists sorted.
func (b *Builder) Receipt() Receipt {
	r := b.r
	r.ScopesGranted, r.ScopesUsed, r.Credentials = keys(b.granted), keys(b.used), keys(b.creds)
	r.Destinations = []Destination{}
	for _, k := range sortedKeys(b.dests) {
		r.Destinations = append(r.Destinations, *b.dests[k])
	}
	r.Denials = []Denial{}
	for _, k := range sortedKeys(b.denials) {
		r.Denials = append(r.Denials, *b.denials[k])
	}
	r.DNSUnused = []string{}
	for _, h := range keys(b.resolved) {
		if !b.hosts[h] {
			r.DNSUnused = append(r.DNSUnused, h)
		}
	}
	if r.Commands == nil {
		r.Commands = []Command{}
	}
	if r.Files == nil {
		r.Files = []File{}
	}
	return r
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Sign returns r as a signed note: its text is r as one line of JSON.
func Sign(r Receipt, s note.Signer) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: string(b) + "\n"}, s)
}

// Open checks a signed receipt, and the checkpoint inside it, against the node's verifier key,
// and returns it. The checkpoint must cover the receipt's last record.
func Open(msg []byte, v note.Verifier) (Receipt, error) {
	var r Receipt
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		return r, fmt.Errorf("receipt: signature: %w", err)
	}
	if err := json.Unmarshal([]byte(n.Text), &r); err != nil {
		return r, fmt.Errorf("receipt: %w", err)
	}
	if r.Checkpoint == "" {
		return r, errors.New("receipt: no checkpoint covers it")
	}
	c, err := audit.OpenCheckpoint([]byte(r.Checkpoint), v)
	if err != nil {
		return r, fmt.Errorf("receipt: its checkpoint: %w", err)
	}
	if c.Seq < r.Records.Last || c.Node != r.Node {
		return r, fmt.Errorf("receipt: its checkpoint (node %s, seq %d) does not cover its last record (node %s, seq %d)", c.Node, c.Seq, r.Node, r.Records.Last)
	}
	return r, nil
}

// Trail is what Make reads.
type Trail interface {
	Flush(ctx context.Context) error
	Query(ctx context.Context, q audit.Query, fn func(audit.Record) error) (audit.Result, error)
	Checkpoint(ctx context.Context) (audit.Checkpoint, error)
}

// The node's trail; package audit cannot name this interface, so the guard stands beside it.
var _ Trail = (*audit.FileSink)(nil)

// ErrNoRecords is Make's error for a lease the trail holds nothing of (for this tenant).
var ErrNoRecords = errors.New("receipt: this node's audit trail holds no records of that lease for this tenant")

// Make builds, covers with a checkpoint and signs tenant's lease's receipt from trail.
func Make(ctx context.Context, trail Trail, s note.Signer, tenant, lease string) ([]byte, error) {
	if err := trail.Flush(ctx); err != nil {
		return nil, err
	}
	b := NewBuilder()
	if _, err := trail.Query(ctx, audit.Query{Tenant: tenant, Lease: lease}, func(r audit.Record) error { b.Add(r); return nil }); err != nil {
		return nil, err
	}
	r := b.Receipt()
	if r.Records.Count == 0 {
		return nil, ErrNoRecords
	}
	// The first checkpoint after the last record; a lease still running (or one that ended
	// since the last) has one signed now.
	var cp string
	q := audit.Query{Kind: string(audit.KindAudit), Event: string(audit.EventCheckpoint), After: r.Records.Last, Limit: 1}
	if _, err := trail.Query(ctx, q, func(rec audit.Record) error { cp = rec.Note; return nil }); err != nil {
		return nil, err
	}
	if cp == "" {
		c, err := trail.Checkpoint(ctx)
		if err != nil {
			return nil, err
		}
		cp = string(c.Note)
	}
	r.Checkpoint = cp
	return Sign(r, s)
}
