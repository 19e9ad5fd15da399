package review

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/slots"
)

// holdStream takes one of the node's stream slots (a live tail, an export) for the session's
// identity, or answers 429 naming the bound reached and reports false. The identity is the
// reviewer key's name or the tenant ("tenant:acme"), never the session, so signing in again
// buys no more; only a reviewer key takes the share kept for reviewers. The caller releases
// the slot when the stream ends.
func (s *Server) holdStream(w http.ResponseWriter, r *http.Request, sess *session) (release func(), ok bool) {
	release, err := s.streams.Take(sess.Who, sess.Reviewer)
	if err == nil {
		return release, true
	}
	l := s.streams.Limits()
	msg := fmt.Sprintf("this node already serves %d live tails and exports, the most it serves at once (review.streams.max); try again when one closes", l.Max)
	var refusal *slots.Refusal
	if errors.As(err, &refusal) {
		switch refusal.Bound {
		case slots.PerIdentity:
			msg = fmt.Sprintf("%s already holds %d live tails and exports on this node, the most one identity may however many times it signs in (review.streams.per_identity); close one, or let an export finish",
				sess.Who, refusal.Held)
		case slots.Shared:
			msg = fmt.Sprintf("the %d live tails and exports this node serves to tenants' keys are all open; the other %d of review.streams.max (%d) are kept for reviewer keys (review.streams.reviewers); try again when one closes",
				refusal.Limit, l.Reserved, l.Max)
		}
	}
	w.Header().Set("Retry-After", "10")
	s.fail(w, r, http.StatusTooManyRequests, msg)
	return nil, false
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
