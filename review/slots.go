package review

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/slots"
)

// kind is what a page holds while it is served.
type kind int

const (
	// call: a page or a form, holding a call slot (review.calls) from the session's check to
	// its end, a slow form body or a slow read of the page included.
	call kind = iota
	// stream: a live tail or an export, which takes a stream slot itself (holdStream) once its
	// request is checked, and holds no call slot.
	stream
)

// hold takes a slot of set for the session's identity, or answers 429 naming the bound reached
// (setting, counting what) and reports false. The identity is the reviewer key's name or the
// tenant ("tenant:acme"), never the session, so signing in again buys no more; only a reviewer
// key takes the share kept for reviewers. The caller releases the slot when the page or stream
// ends.
func (s *Server) hold(w http.ResponseWriter, r *http.Request, sess *session, set *slots.Set, setting, what string) (release func(), ok bool) {
	release, err := set.Take(sess.Who, sess.Reviewer)
	if err == nil {
		return release, true
	}
	l := set.Limits()
	msg := fmt.Sprintf("this node already serves %d %s, the most it serves at once (%s.max); try again when one ends", l.Max, what, setting)
	var refusal *slots.Refusal
	if errors.As(err, &refusal) {
		switch refusal.Bound {
		case slots.PerIdentity:
			msg = fmt.Sprintf("%s already holds %d %s on this node, the most one identity may however many times it signs in (%s.per_identity); close one, or let one finish",
				sess.Who, refusal.Held, what, setting)
		case slots.Shared:
			msg = fmt.Sprintf("the %d %s this node serves to tenants' keys are all open; the other %d of %s.max (%d) are kept for reviewer keys (%s.reviewers); try again when one ends",
				refusal.Limit, what, l.Reserved, setting, l.Max, setting)
		}
	}
	w.Header().Set("Retry-After", "10")
	s.fail(w, r, http.StatusTooManyRequests, msg)
	return nil, false
}

// holdStream takes one of the node's stream slots (a live tail, an export), as hold does.
func (s *Server) holdStream(w http.ResponseWriter, r *http.Request, sess *session) (release func(), ok bool) {
	return s.hold(w, r, sess, s.streams, "review.streams", "live tails and exports")
}

// Refuse answers a request on a connection past review.connections (package slots) with msg,
// as the page answers every error.
func (s *Server) Refuse(w http.ResponseWriter, r *http.Request, msg string) {
	s.headers(w)
	s.fail(w, r, http.StatusTooManyRequests, msg)
}

// errSessionEnded is why a stream ended with its session.
var errSessionEnded = errors.New("the session ended")

// sessionContext is the request's context, ended too when the session ends (sign-out, or the
// node dropping it) and when it expires, so no stream a session opened outlives it.
func (s *Server) sessionContext(r *http.Request, sess *session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	ctx, stop := context.WithTimeoutCause(ctx, sess.expires.Sub(s.cfg.Now()), errSessionEnded)
	go func() {
		select {
		case <-sess.done:
			cancel(errSessionEnded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// sessionEnded reports whether ctx (from sessionContext) ended because its session did, or sess
// has ended or expired by the page's clock.
func (s *Server) sessionEnded(ctx context.Context, sess *session) bool {
	return errors.Is(context.Cause(ctx), errSessionEnded) || !s.sessions.live(sess)
}
