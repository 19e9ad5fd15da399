package gateway

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/airlock-dev/airlock/gateway/broker"
	"github.com/airlock-dev/airlock/rule"
)

// A credential is never sent in clear text: a plain http:// request that a credential scope
// covers is refused before the broker is asked, unless the catalog entry lists that port.
func TestCredentialNeverInClearText(t *testing.T) {
	h := newHarness(t)
	p := h.proxyHandler()
	pins := map[string]netip.AddrPort{}
	for k, v := range p.dyn.Load().pins {
		pins[k] = v
	}
	pins["api.example.test:80"] = netip.MustParseAddrPort(h.plain.Listener.Addr().String())
	p.Reload(p.dyn.Load().catalog, pins, nil, p.dyn.Load().budget)
	status, got := rawPlain(t, h, "GET http://api.example.test/v1/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
	if status != http.StatusForbidden || got != rule.CleartextCredential {
		t.Fatalf("plain http with a credential scope: status %d rule %q, want 403 %s", status, got, rule.CleartextCredential)
	}
	if got := h.received(); len(got) > 0 || h.asked.Load() > 0 {
		t.Fatalf("refused request reached the upstream (%v) or the broker (%d)", got, h.asked.Load())
	}
	if rec := h.sink.last(); rec.Rule != rule.CleartextCredential || rec.Credential != "" {
		t.Fatalf("audit record %+v", rec)
	}

	// An entry that allows port 80 explicitly gets it injected there.
	entries := []broker.Entry{{
		Name: "demo", Source: broker.Source{Kind: broker.SourceKV, Path: "demo"},
		Inject: broker.Injection{Kind: broker.InjectHeader, Header: "Authorization", Template: "Bearer {{.token}}"},
		Hosts:  []string{"api.example.test"}, PlainHTTPPorts: []int{80},
	}}
	catalog, err := broker.NewCatalog(entries)
	if err != nil {
		t.Fatal(err)
	}
	p.Reload(catalog, pins, nil, p.dyn.Load().budget)
	if status, _ := rawPlain(t, h, "GET http://api.example.test/v1/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n"); status != 200 {
		t.Fatalf("plain http allowed by plain_http_ports: status %d", status)
	}
	if rec := h.sink.last(); rec.Credential != "demo" {
		t.Fatalf("audit record %+v", rec)
	}
	if _, err := broker.NewCatalog([]broker.Entry{{Name: "x", Source: broker.Source{Kind: broker.SourceKV, Path: "p"},
		Inject: broker.Injection{Kind: broker.InjectBasic}, Hosts: []string{"a.example"}, PlainHTTPPorts: []int{0}}}); err == nil {
		t.Fatal("plain_http_ports: [0] was accepted")
	}
}
