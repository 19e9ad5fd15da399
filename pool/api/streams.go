package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/slots"
)

// streamCalls names, for a refusal, the calls that hold a stream slot.
const streamCalls = "commands, process output and waits, file transfers, audit pages"

// stream holds one of the tenant's stream slots for the whole of a call that can stay open for
// minutes (a command and its output, a long poll, a file transfer, an audit page), or refuses
// the call with 429 naming the bound reached. The identity is the tenant, whichever of its keys
// calls, so more keys or more connections buy no more; a call forwarded to the node holding the
// lease holds a slot there too.
func (s *Server) stream(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant := tenantOf(r)
		release, err := s.streams.Take(tenant, false)
		if err != nil {
			w.Header().Set("Retry-After", "5")
			writeError(w, http.StatusTooManyRequests, "too_many_streams", streamRefusal(tenant, err))
			return
		}
		defer release()
		h(w, r)
	}
}

// streamRefusal says which stream bound refused a tenant's call, naming its setting.
func streamRefusal(tenant string, err error) string {
	var refusal *slots.Refusal
	if errors.As(err, &refusal) && refusal.Bound == slots.PerIdentity {
		return fmt.Sprintf("tenant %s already holds %d calls open on this node (%s), the most one tenant may, all its keys together (api.streams.per_identity); retry when one ends",
			tenant, refusal.Held, streamCalls)
	}
	held := 0
	if refusal != nil {
		held = refusal.Held
	}
	return fmt.Sprintf("this node already holds %d calls open (%s), the most it serves at once (api.streams.max); retry when one ends", held, streamCalls)
}
