package suggest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/scope"
)

// The suggestion allows exactly what the lease did: every allowed request matches one of its
// scopes, every refused destination none; prefixes stay few.
func TestSuggestion(t *testing.T) {
	l := "l-1"
	recs := []audit.Record{
		{Kind: audit.KindLease, Event: "bind", Lease: l, Scopes: []string{"api.example.test", "pypi.org", "unused.example"}},
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope api.example.test", Lease: l, Method: "GET", Host: "api.example.test", Port: 443, Path: "/whoami", Credential: "demo"},
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope api.example.test", Lease: l, Method: "POST", Host: "api.example.test", Port: 443, Path: "/v1/items/7", Credential: "demo"},
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope pypi.org", Lease: l, Method: "GET", Host: "pypi.org", Port: 443, Path: "/simple/a[b]/"},
		{Kind: audit.KindHTTP, Decision: audit.Allow, Reason: "scope git.example:8443", Lease: l, Method: "CONNECT", Host: "git.example", Port: 8443, Event: "open"},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "no scope", Lease: l, Method: "GET", Host: "evil.example", Port: 80, Path: "/"},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "no scope", Lease: l, Method: "GET", Host: "evil.example", Port: 80, Path: "/"},
		{Kind: audit.KindDNS, Decision: audit.Deny, Rule: "scope-miss", Reason: "no scope", Lease: l, QName: "Other.Example.", QType: "A"},
		{Kind: audit.KindDNS, Decision: audit.Deny, Rule: "bad-request", Reason: "bad name", Lease: l, QName: "<svg>.example.", QType: "A"},
		{Kind: audit.KindHTTP, Decision: audit.Allow, Lease: "l-other", Method: "GET", Host: "someone-else.example", Port: 443, Path: "/"},
	}
	for i := range recs {
		recs[i].Seq = uint64(i + 1)
	}
	s, err := For(l, recs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := scope.Parse(s.Scopes)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Lease != l || r.Kind != audit.KindHTTP {
			continue
		}
		method, p := r.Method, r.Path
		if r.Event == "open" {
			method, p = "", ""
		}
		got, ok := set.Match(scope.Request{Host: r.Host, Port: r.Port, Method: method, Path: p})
		if (r.Decision == audit.Allow) != ok {
			t.Errorf("%s %s:%d%s (%s): matched %v by %v", r.Method, r.Host, r.Port, r.Path, r.Decision, ok, got)
		}
	}
	if _, ok := set.Match(scope.Request{Host: "api.example.test", Port: 443, Method: "DELETE", Path: "/v1/items/7"}); ok {
		t.Error("a method the lease never used is allowed")
	}
	if _, ok := set.Match(scope.Request{Host: "someone-else.example", Port: 443, Method: "GET", Path: "/"}); ok {
		t.Error("another lease's destination is allowed")
	}
	if !reflect.DeepEqual(s.Unused, []string{"unused.example"}) {
		t.Errorf("unused: %v", s.Unused)
	}
	if len(s.Denied) != 2 || s.Denied[0].Count != 2 || s.Denied[0].Scope.Host != "evil.example" || s.Denied[1].Scope.Host != "other.example" {
		b, _ := json.Marshal(s.Denied)
		t.Errorf("denied: %s", b)
	}
}

func TestPrefixes(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"/whoami"}, []string{"/whoami"}},
		{[]string{"/a/b/c", "/a/b/d"}, []string{"/a/b/*"}},
		{[]string{"/a/b/c", "/a/x/d", "/q"}, []string{"/a/b/*", "/a/x/*", "/q"}},
	} {
		if got := Prefixes(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Prefixes(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("/pkg/%d/file", i))
	}
	if got := Prefixes(many); !reflect.DeepEqual(got, []string{"/pkg/*"}) {
		t.Errorf("100 folders under /pkg: %v", got)
	}
	var roots []string
	for i := range 20 {
		roots = append(roots, fmt.Sprintf("/f%d", i))
	}
	if got := Prefixes(roots); !reflect.DeepEqual(got, []string{"/*"}) {
		t.Errorf("20 files at the root: %v", got)
	}
}
