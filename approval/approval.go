// Package approval holds the requests a scope asks approval for until a reviewer answers: one
// pending approval per distinct request (its retries join it), answered once, for the rest of
// the lease, or denied with a reason, each step recorded with the reviewer. It lives in the
// node's memory only, so a node that restarts refuses what was pending instead of passing it.
package approval

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Approval is a held request as reviewers see it.
type Approval struct {
	ID      string    `json:"id"`
	Lease   string    `json:"lease"`
	Tenant  string    `json:"tenant"`
	Task    string    `json:"task"`
	Method  string    `json:"method"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Path    string    `json:"path"` // with its query
	Scope   string    `json:"scope"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// Waiting is how many requests are held on it now.
	Waiting int `json:"waiting"`
}

// Config is what a Registry needs.
type Config struct {
	// Hold is how long a request waits for an answer before the sandbox is told the approval is
	// pending (0: 30s); TTL how long an unanswered approval lasts (0: 10m).
	Hold, TTL time.Duration
	Node      string
	Audit     audit.Sink
	// Notify is called, on a goroutine of its own, for each new approval (a webhook).
	Notify func(Approval)
	// LeaseKey returns the hex SHA-256 of the API key that leased a lease (Check refuses it
	// as an approver), unless AllowSelf; with neither, Check refuses every approval.
	LeaseKey  func(ctx context.Context, tenant, lease string) (string, error)
	AllowSelf bool
	Now       func() time.Time
}

// Registry holds requests for reviewers. Safe for concurrent use.
type Registry struct {
	cfg     Config
	mu      sync.Mutex
	pending map[string]*pending // by id
	byKey   map[string]*pending // by request (Request.key)
	grants  map[string]map[string]grant
}

type pending struct {
	Approval
	key      string
	leaseEnd time.Time
	done     chan struct{} // closed when answered
	answered bool
	approved bool
	forLease bool
	reviewer string
	reason   string
}

type grant struct {
	reviewer string
	until    time.Time // the lease's end
}

// Errors of Check.
var (
	// ErrNoApproval is returned for an approval that is not pending (answered, expired, or
	// never), or that the answerer may not see.
	ErrNoApproval = errors.New("no such approval is pending")
	// ErrSelfApproval is returned when the key that leased would answer its own request.
	ErrSelfApproval = errors.New("the key that leased the sandbox cannot approve its own request (another key or a reviewer must)")
	// ErrNeedReason is returned for a denial without a reason.
	ErrNeedReason = errors.New("a denial needs a reason (the sandbox is told it)")
)

// Reviewer is a reviewer key's identity, as the review page and the API's approval endpoints
// take it: its name, and the tenants whose leases it reads and whose approvals it answers
// (AllTenants among them: every tenant). A reviewer key cannot lease or run anything.
type Reviewer struct {
	Name    string
	Tenants []string
}

// AllTenants, in a reviewer's tenants, stands for every tenant.
const AllTenants = "*"

// Everyone reports whether r reads every tenant.
func (r Reviewer) Everyone() bool { return slices.Contains(r.Tenants, AllTenants) }

// Answerer is who would answer an approval: the name recorded, the hex SHA-256 of the key it
// answers with, and which tenants' approvals it may see.
type Answerer struct {
	Name    string
	KeyHash string
	Sees    func(tenant string) bool
}

// Check says whether who may answer approval id so (every way of answering asks it): the
// approval is pending and of a tenant who sees, a denial has a reason, and an approval does not
// come from the key that leased the sandbox (unless AllowSelf). It returns the approval.
func (a *Registry) Check(ctx context.Context, id string, who Answerer, approve bool, reason string) (Approval, error) {
	ap, ok := a.Get(id)
	if !ok || !who.Sees(ap.Tenant) {
		return Approval{}, fmt.Errorf("%w: %s", ErrNoApproval, id)
	}
	if !approve && strings.TrimSpace(reason) == "" {
		return ap, ErrNeedReason
	}
	if !approve || a.cfg.AllowSelf {
		return ap, nil
	}
	if a.cfg.LeaseKey == nil {
		return ap, fmt.Errorf("who leased %s cannot be known here, so its requests cannot be approved", ap.Lease)
	}
	key, err := a.cfg.LeaseKey(ctx, ap.Tenant, ap.Lease)
	if err != nil {
		return ap, fmt.Errorf("lease %s of approval %s cannot be read, so who leased it is unknown: %v", ap.Lease, ap.ID, err)
	}
	if key != "" && key == who.KeyHash {
		return ap, ErrSelfApproval
	}
	return ap, nil
}

// New returns an empty registry.
func New(cfg Config) *Registry {
	if cfg.Hold <= 0 {
		cfg.Hold = 30 * time.Second
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Audit == nil {
		cfg.Audit = audit.Discard{}
	}
	return &Registry{cfg: cfg, pending: map[string]*pending{}, byKey: map[string]*pending{}, grants: map[string]map[string]grant{}}
}

// Request is a request a scope holds.
type Request struct {
	Lease, Tenant, Task, Method, Host string
	Port                              int
	Path, Query, Scope                string
	// LeaseEnd is when the lease ends: a grant for the lease lasts until then.
	LeaseEnd time.Time
}

// key is what makes two requests the same one for an approval: the lease, the method, the
// destination, the path and its query. The body is not part of it: a reviewer approves a
// request line.
func (r Request) key() string {
	return fmt.Sprintf("%s\x00%s\x00%s:%d\x00%s?%s", r.Lease, r.Method, r.Host, r.Port, r.Path, r.Query)
}

// Outcome is what became of a held request.
type Outcome struct {
	// Approved lets it go on; ForLease says the grant covers the lease's identical requests.
	Approved, ForLease bool
	// Denied says a reviewer refused it, for Reason. Neither: it is still pending.
	Denied           bool
	Reviewer, Reason string
	Pending          Approval
}

// Wait holds a request until a reviewer answers or the hold ends. A grant for the lease lets it
// through at once; a pending approval of the same request is joined, not duplicated. The caller's
// own goroutine waits, on a channel and a timer: Wait starts none.
func (a *Registry) Wait(ctx context.Context, r Request) Outcome {
	key := r.key()
	now := a.cfg.Now()
	a.mu.Lock()
	a.expire(now)
	if g, ok := a.grants[r.Lease][key]; ok {
		a.mu.Unlock()
		return Outcome{Approved: true, ForLease: true, Reviewer: g.reviewer}
	}
	pd := a.byKey[key]
	if pd == nil {
		path := r.Path
		if r.Query != "" {
			path += "?" + r.Query
		}
		pd = &pending{key: key, leaseEnd: r.LeaseEnd, done: make(chan struct{}), Approval: Approval{ID: "ap-" + randomHex(8),
			Lease: r.Lease, Tenant: r.Tenant, Task: r.Task, Method: r.Method, Host: r.Host, Port: r.Port, Path: path, Scope: r.Scope,
			Created: now, Expires: now.Add(a.cfg.TTL)}}
		a.pending[pd.ID], a.byKey[key] = pd, pd
		a.record(pd, EventRequest, "", "held for a reviewer by scope "+pd.Scope)
		if a.cfg.Notify != nil {
			go a.cfg.Notify(pd.Approval)
		}
	}
	pd.Waiting++
	a.mu.Unlock()

	timer := time.NewTimer(a.cfg.Hold)
	defer timer.Stop()
	select {
	case <-pd.done:
	case <-timer.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pd.Waiting--
	switch {
	case pd.answered && pd.approved:
		return Outcome{Approved: true, ForLease: pd.forLease, Reviewer: pd.reviewer}
	case pd.answered:
		return Outcome{Denied: true, Reviewer: pd.reviewer, Reason: pd.reason, Pending: pd.Approval}
	}
	return Outcome{Pending: pd.Approval}
}

// Answer approves (once, or for the rest of the lease) or denies a pending approval in the name
// of reviewer; the requests held on it go on or are refused at once.
func (a *Registry) Answer(id, reviewer string, approve, forLease bool, reason string) (Approval, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(a.cfg.Now())
	pd := a.pending[id]
	if pd == nil {
		return Approval{}, fmt.Errorf("%w: %s", ErrNoApproval, id)
	}
	pd.answered, pd.approved, pd.forLease, pd.reviewer, pd.reason = true, approve, forLease && approve, reviewer, reason
	delete(a.pending, id)
	delete(a.byKey, pd.key)
	event, why := EventDeny, "denied: "+reason
	switch {
	case approve && forLease:
		event, why = EventGrant, "approved for the lease"
		if a.grants[pd.Lease] == nil {
			a.grants[pd.Lease] = map[string]grant{}
		}
		a.grants[pd.Lease][pd.key] = grant{reviewer: reviewer, until: pd.leaseEnd}
	case approve:
		event, why = EventGrant, "approved once"
	}
	a.record(pd, event, reviewer, why)
	close(pd.done)
	return pd.Approval, nil
}

// Get returns a pending approval.
func (a *Registry) Get(id string) (Approval, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(a.cfg.Now())
	if pd := a.pending[id]; pd != nil {
		return pd.Approval, true
	}
	return Approval{}, false
}

// List returns the pending approvals of the tenants visible lets the caller see, oldest first.
func (a *Registry) List(visible func(tenant string) bool) []Approval {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire(a.cfg.Now())
	out := []Approval{}
	for _, pd := range a.pending {
		if visible(pd.Tenant) {
			out = append(out, pd.Approval)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// expire ends the approvals no one answered in time, each recorded, and the grants of leases
// that have ended; the caller holds mu.
func (a *Registry) expire(now time.Time) {
	for id, pd := range a.pending {
		if now.After(pd.Expires) {
			delete(a.pending, id)
			delete(a.byKey, pd.key)
			a.record(pd, EventExpire, "", "no reviewer answered within "+a.cfg.TTL.String())
		}
	}
	for lease, gs := range a.grants {
		for k, g := range gs {
			if now.After(g.until) {
				delete(gs, k)
			}
		}
		if len(gs) == 0 {
			delete(a.grants, lease)
		}
	}
}

// Events of an approval's records (KindHTTP, with the held request).
const (
	EventRequest audit.Event = "approval-request" // held for a reviewer
	EventGrant   audit.Event = "approval-grant"   // a reviewer approved it, once or for the lease
	EventDeny    audit.Event = "approval-deny"    // a reviewer denied it
	EventExpire  audit.Event = "approval-expire"  // no reviewer answered in time
)

// record writes an approval step to the trail with who took it.
func (a *Registry) record(pd *pending, event audit.Event, reviewer, reason string) {
	a.cfg.Audit.Write(context.Background(), audit.Record{Time: a.cfg.Now(), Kind: audit.KindHTTP, Node: a.cfg.Node, Event: event,
		Tenant: pd.Tenant, Lease: pd.Lease, Task: pd.Task, Method: pd.Method, Host: pd.Host, Port: pd.Port, Path: pd.Path,
		Reviewer: reviewer, Reason: pd.ID + ": " + reason})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Webhook returns a Notify that POSTs each new approval as JSON to url ({"event":
// "approval-request", "node", "approval"}), telling log when the receiver does not take it
// (reviewers still see the approval through the API).
func Webhook(url, node string, client *http.Client, log *slog.Logger) func(Approval) {
	return func(ap Approval) {
		body, _ := json.Marshal(map[string]any{"event": "approval-request", "node": node, "approval": ap})
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 300 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		if err != nil {
			log.Warn("approval webhook not told (reviewers still see it in airlock approvals)", "approval", ap.ID, "err", err)
		}
	}
}
