package review

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// filterParams are the filters a view takes from its URL (so a view can be shared), in the
// order the filter bar shows them.
var filterParams = []string{"since", "until", "tenant", "lease", "task", "decision", "rule", "host", "kind", "event", "flagged"}

// defaultSince is the time range of a view whose URL names none.
const defaultSince = "24h"

// filter is a view's filters: as the URL gave them (for links and the filter bar) and as the
// query the trail answers, the tenant set from the session.
type filter struct {
	Values url.Values
	Q      audit.Query
}

// filterOf reads the request's filters. The tenant is the session's to decide (see
// session.tenant); a time given as a duration is read back from now, and shown as the time it
// stands for.
func (s *Server) filterOf(r *http.Request) (filter, error) {
	in := r.URL.Query()
	v := url.Values{}
	for _, k := range filterParams {
		if x := strings.TrimSpace(in.Get(k)); x != "" {
			v.Set(k, x)
		}
	}
	if _, ok := in["since"]; !ok {
		v.Set("since", defaultSince)
	}
	q, err := audit.ParseQuery(v, s.cfg.Now())
	if err != nil {
		return filter{}, err
	}
	q.Limit = 0
	if q.Tenant, err = sessionOf(r).tenant(v.Get("tenant")); err != nil {
		return filter{}, err
	}
	return filter{Values: v, Q: q}, nil
}

// Link returns path with the view's filters, changed by pairs of name and value ("" removes
// one).
func (f filter) Link(path string, set ...string) string {
	v := url.Values{}
	for k, x := range f.Values {
		v[k] = append([]string(nil), x...)
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			v.Del(set[i])
		} else {
			v.Set(set[i], set[i+1])
		}
	}
	if _, ok := v["since"]; !ok {
		v.Set("since", "") // an empty since is "all time", not the default range
	}
	return path + "?" + v.Encode()
}

// Get returns one filter's value as the URL gave it.
func (f filter) Get(k string) string { return f.Values.Get(k) }

// Range describes the time range in words.
func (f filter) Range() string {
	from, to := "the beginning", "now"
	if !f.Q.Since.IsZero() {
		from = f.Q.Since.UTC().Format(time.DateTime) + " UTC"
	}
	if !f.Q.Until.IsZero() {
		to = f.Q.Until.UTC().Format(time.DateTime) + " UTC"
	}
	return from + " to " + to
}

// Active lists the filters set besides time, as name=value pairs for the page's heading.
func (f filter) Active() []string {
	var out []string
	for _, k := range filterParams[2:] {
		if x := f.Values.Get(k); x != "" {
			out = append(out, k+"="+x)
		}
	}
	return out
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
