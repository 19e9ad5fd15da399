package gateway

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
	"github.com/airlock-dev/airlock/token"
)

// A mirrored name is decided on the name asked and sent to the mirror: the mirror's TLS, the
// mirror's Host, a credential only if the catalog lets it go to the mirror; the record names
// both, and explain says so.
func TestMirroredName(t *testing.T) {
	h := newHarness(t)
	p := h.proxy.Config.Handler.(*Proxy)
	d := p.dyn.Load()
	p.Reload(d.catalog, d.pins, map[string]Mirror{
		"pypi.org:443":      {Scheme: "https", Host: "api.example.test", Port: 443},
		"registry.test:443": {Scheme: "https", Host: "api.example.test", Port: 443},
		// The catalog lets demo go to api.example.test only, whatever the name asked.
		"api.example.test:443": {Scheme: "https", Host: "open.example.test", Port: 443},
	}, d.budget)
	h.mu.Lock()
	h.scopes = append([]scope.Scope{
		{Host: "pypi.org", Methods: []string{"GET"}, Profile: "pypi"},
		{Host: "registry.test", Credential: "demo"},
	}, h.scopes...)
	h.mu.Unlock()
	var sawHost string
	h.answer(func(w http.ResponseWriter, r *http.Request) {
		sawHost = r.Host
		io.WriteString(w, "mirror auth="+r.Header.Get("Authorization"))
	})
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := h.client().Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("https://pypi.org/simple/demo/"); st != 200 || body != "mirror auth=" || sawHost != "api.example.test" {
		t.Fatalf("mirrored GET: %d %q (mirror saw Host %q)", st, body, sawHost)
	}
	rec, ok := h.sink.await(func(r audit.Record) bool { return r.Host == "pypi.org" && r.Path == "/simple/demo/" })
	if !ok || rec.Mirror != "https://api.example.test:443" || rec.Decision != audit.Allow || rec.Upstream == "" {
		t.Fatalf("record %+v", rec)
	}
	// The scope is the name asked: a method it does not allow is refused before the mirror.
	resp, err := h.client().Post("https://pypi.org/legacy/", "text/plain", nil)
	if err != nil || resp.StatusCode != http.StatusForbidden || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.ScopeMiss {
		t.Fatalf("POST to the mirrored name: %v %v", resp, err)
	}
	// The credential goes to the mirror, which the catalog lists.
	if st, body := get("https://registry.test/x"); st != 200 || body != "mirror auth=Bearer [redacted]" {
		t.Fatalf("mirrored GET with a credential: %d %q", st, body)
	}
	dev, _ := token.NewDevIssuer("dev", "aud")
	v := &token.Verifier{Audience: "aud", Issuers: map[string]token.Issuer{"dev": dev.Issuer(time.Hour)}, Profiles: scope.Builtin()}
	p.cfg.Verify = v.Verify
	raw, _ := dev.MintWith("task-m", "", nil, []string{"pypi"}, time.Minute)
	resp, err = h.client().Get("https://api.example.test/v1/x")
	if err != nil || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.CredentialDenied {
		t.Fatalf("a credential towards a mirror the catalog does not list: %v %v", resp, err)
	}
	ex, err := p.Explain(raw, "GET", "https://pypi.org/simple/demo/")
	if err != nil || ex.Mirror != "https://api.example.test:443" || ex.Profile != "pypi" || ex.Decision != "allow" {
		t.Fatalf("explain: %+v %v", ex, err)
	}
}
