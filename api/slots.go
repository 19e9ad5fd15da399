package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/slots"
)

// A call holds a slot of its caller's bounds from its start to its end, whatever holds it open
// (a slow body, a slow read of the answer, a long poll): a stream slot (api.streams) when it
// may stay open for minutes, a call slot (api.calls) otherwise. The identity is the tenant,
// whichever of its keys calls, or the reviewer key (approvals only), so more keys or more
// connections buy no more; a call forwarded to the node holding the lease holds a slot there
// too. Before the caller is known, package slots bounds connections per address.

// kind is what a route holds, and how long its body may take (package slots).
type kind int

const (
	// call holds a call slot; its body (JSON) comes whole within api.timeouts.body.
	call kind = iota
	// stream holds a stream slot; its body, if any, as a call's.
	stream
	// upload holds a stream slot; its body flows as long as it moves (api.timeouts.stall).
	upload
	// terminal holds a stream slot; a body that is the command's input (the request in
	// ExecHeader) may wait without end, as a terminal's user does.
	terminal
)

// caller is who holds a call's slot.
type caller struct {
	tenant   string // or:
	reviewer string // a reviewer key's name
}

func (c caller) identity() string {
	if c.reviewer != "" {
		return "reviewer:" + c.reviewer
	}
	return "tenant:" + c.tenant
}

func (c caller) String() string {
	if c.reviewer != "" {
		return "reviewer key " + c.reviewer
	}
	return "tenant " + c.tenant
}

// hold takes the slot r's kind holds for who, and sets how long r's body may take; it answers
// 429 naming the bound reached, with Retry-After, and reports false when the slot is refused.
// The caller releases the slot when the call ends.
func (s *Server) hold(w http.ResponseWriter, r *http.Request, k kind, who caller) (release func(), ok bool) {
	set, setting, code := s.calls, "api.calls", "too_many_calls"
	if k != call {
		set, setting, code = s.streams, "api.streams", "too_many_streams"
	}
	release, err := set.Take(who.identity(), who.reviewer != "")
	if err != nil {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, code, refusal(who, k, setting, set.Limits(), err))
		return nil, false
	}
	switch {
	case k == upload:
		slots.Upload(r)
	case k == terminal && r.Header.Get(ExecHeader) != "":
		slots.Interactive(r)
	}
	return release, true
}

// streamCalls names, for a refusal, the calls that hold a stream slot.
const streamCalls = "commands, process output and waits, file transfers, audit pages"

// refusal says which bound refused who's call of kind k, naming its setting.
func refusal(who caller, k kind, setting string, l slots.Limits, err error) string {
	what, which := "calls in progress", ""
	if k != call {
		what, which = "calls open", " ("+streamCalls+")"
	}
	var r *slots.Refusal
	errors.As(err, &r)
	if r == nil {
		r = &slots.Refusal{Bound: slots.Node, Held: l.Max, Limit: l.Max}
	}
	switch r.Bound {
	case slots.PerIdentity:
		one := "one reviewer key may"
		if who.reviewer == "" {
			one = "one tenant may, all its keys together"
		}
		return fmt.Sprintf("%s already holds %d %s on this node%s, the most %s (%s.per_identity); retry when one ends", who, r.Held, what, which, one, setting)
	case slots.Shared:
		return fmt.Sprintf("the %d %s%s this node serves to tenants' keys are all taken; the other %d of %s.max (%d) are kept for reviewer keys (%s.reviewers); retry when one ends",
			r.Limit, what, which, l.Reserved, setting, l.Max, setting)
	}
	return fmt.Sprintf("this node already holds %d %s%s, the most it serves at once (%s.max); retry when one ends", r.Held, what, which, setting)
}

// Refuse answers a request on a connection past api.connections (package slots) with msg, as
// every refusal of the API is answered.
func (s *Server) Refuse(w http.ResponseWriter, r *http.Request, msg string) {
	writeError(w, http.StatusTooManyRequests, "too_many_connections", msg)
}
