package suggest

import (
	"encoding/json"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/scope"
)

// What the gateway's recheck cut is what the operator took away (a token swap, the lease's
// end): never a denial to allow, never a scope to suggest, for a request or a tunnel alike.
func TestSuggestionLeavesOutCuts(t *testing.T) {
	l := "l-1"
	cut := "cut by the recheck: task t-1 has no scope allowing POST api.example.test:443/v1/deploy"
	recs := []audit.Record{
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope api.example.test", Lease: l, Method: "GET", Host: "api.example.test", Port: 443, Path: "/v1/read", Credential: "demo"},
		// A request cut after it was sent, and one refused at its last decision before it.
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Event: audit.EventCut, Lease: l, Method: "POST", Host: "api.example.test", Port: 443, Path: "/v1/deploy", Credential: "demo",
			Scopes: []string{"api.example.test"}},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Event: audit.EventCut, Lease: l, Method: "POST", Host: "api.example.test", Port: 443, Path: "/v1/admin"},
		// A cut written before EventCut: its reason alone says so.
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Lease: l, Method: "PUT", Host: "api.example.test", Port: 443, Path: "/v1/old"},
		// A tunnel opened, then closed by the recheck.
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope git.example:22", Lease: l, Method: "CONNECT", Host: "git.example", Port: 22, Event: audit.EventOpen},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "cut by the recheck: task t-1 has no scope for git.example:22", Lease: l, Method: "CONNECT", Host: "git.example", Port: 22, Event: audit.EventClose},
		// A request the task asked for anew is still a denial to suggest.
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "no scope", Lease: l, Method: "GET", Host: "new.example", Port: 443, Path: "/x"},
	}
	s, err := For(l, recs)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Denied) != 1 || s.Denied[0].Scope.Host != "new.example" {
		b, _ := json.Marshal(s.Denied)
		t.Fatalf("denied: %s, want only new.example", b)
	}
	set, err := scope.Parse(s.Scopes)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/v1/deploy", "/v1/admin", "/v1/old"} {
		if sc, ok := set.Match(scope.Request{Host: "api.example.test", Port: 443, Method: "POST", Path: p}); ok {
			t.Errorf("the suggestion allows the cut %s again, by %v", p, sc)
		}
	}
	if _, ok := set.Match(scope.Request{Host: "git.example", Port: 22}); !ok {
		t.Error("the tunnel the lease opened is not suggested")
	}
	if len(s.Scopes) != 2 {
		t.Errorf("scopes: %+v, want the request's and the tunnel's", s.Scopes)
	}
}
