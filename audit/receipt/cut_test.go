package receipt

import (
	"reflect"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// A receipt lists every credential that left the gateway: a request cut after it was sent
// carried its credential upstream, under the scope its record names; one refused before it was
// sent carried nothing, whatever credential it would have.
func TestReceiptListsWhatCutRequestsCarried(t *testing.T) {
	cut := "cut by the recheck: task t-1 has no scope allowing POST api.example.test:443/v1/deploy"
	b := NewBuilder()
	for _, r := range []audit.Record{
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Event: audit.EventCut, Method: "POST", Host: "api.example.test", Port: 443,
			Path: "/v1/deploy", Credential: "demo", Upstream: "192.0.2.1:443", Scopes: []string{"api.example.test"}},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Event: audit.EventCut, Method: "POST", Host: "api.example.test", Port: 443,
			Path: "/v1/admin", Credential: "admin"},
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "budget", Reason: "over budget", Method: "POST", Host: "vault.example.test", Port: 443, Credential: "vault"},
		// Written before EventCut: an upstream connection says it may have been sent.
		{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: cut, Method: "GET", Host: "s3.example.test", Port: 443, Credential: "aws", Upstream: "192.0.2.2:443"},
	} {
		b.Add(r)
	}
	r := b.Receipt()
	if !reflect.DeepEqual(r.Credentials, []string{"aws", "demo"}) {
		t.Errorf("credentials %v, want the two that went upstream", r.Credentials)
	}
	if !reflect.DeepEqual(r.ScopesUsed, []string{"api.example.test"}) {
		t.Errorf("scopes used %v", r.ScopesUsed)
	}
	for _, d := range r.Destinations {
		if d.Host == "api.example.test" && (d.Denied != 2 || !reflect.DeepEqual(d.Credentials, []string{"demo"})) {
			t.Errorf("destination %+v", d)
		}
	}
	if len(r.Denials) != 3 {
		t.Errorf("denials %+v: a cut is still a refusal", r.Denials)
	}
}
