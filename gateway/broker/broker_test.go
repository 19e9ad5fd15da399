package broker

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestCatalogAuthorizeAndApply(t *testing.T) {
	cat, err := NewCatalog([]Entry{
		{Name: "gh", Source: Source{Kind: SourceKV, Path: "gh"}, Hosts: []string{"api.github.com", "*.githubusercontent.com"},
			Inject: Injection{Kind: InjectHeader, Header: "Authorization", Template: "token {{.token}}"}, Tenants: []string{"acme"}},
		{Name: "db", Source: Source{Kind: SourceKV, Path: "db"}, Hosts: []string{"db.example.test"}, Inject: Injection{Kind: InjectBasic}},
		{Name: "q", Source: Source{Kind: SourceKV, Path: "q"}, Hosts: []string{"maps.example.test"},
			Inject: Injection{Kind: InjectQuery, Param: "key", Template: "{{.token}}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, cred, host, tenant string }{
		{"host outside the catalog's list", "gh", "evil.example", "acme"},
		{"suffix trick", "gh", "api.github.com.evil.example", "acme"},
		{"other tenant", "gh", "api.github.com", "other"},
		{"unknown credential", "nope", "api.github.com", "acme"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := cat.Authorize(tt.cred, tt.host, tt.tenant); !errors.Is(err, ErrNotAllowed) {
				t.Fatalf("Authorize = %v, want ErrNotAllowed", err)
			}
		})
	}
	e, err := cat.Authorize("gh", "raw.githubusercontent.com", "acme")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("GET", "https://raw.githubusercontent.com/x", nil)
	r.Header.Add("Authorization", "token forged-1")
	r.Header.Add("authorization", "token forged-2")
	injected, err := e.Apply(r, Secret{"token": "real"})
	if err != nil {
		t.Fatal(err)
	}
	if len(injected) != 1 || injected[0] != "token real" {
		t.Fatalf("Apply reports it injected %q", injected)
	}
	if v := r.Header.Values("Authorization"); len(v) != 1 || v[0] != "token real" {
		t.Fatalf("Authorization = %q", v)
	}

	r, _ = http.NewRequest("GET", "https://maps.example.test/x?key=forged&a=1", nil)
	cat["q"].Apply(r, Secret{"token": "real"})
	if q := r.URL.Query(); len(q["key"]) != 1 || q.Get("key") != "real" || q.Get("a") != "1" {
		t.Fatalf("query = %v", q)
	}

	r, _ = http.NewRequest("GET", "https://db.example.test/", nil)
	injected, _ = cat["db"].Apply(r, Secret{"username": "u", "password": "p"})
	if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
		t.Fatalf("basic auth = %q %q", u, p)
	}
	if len(injected) != 2 || injected[0] != r.Header.Get("Authorization") || injected[1] != "u:p" {
		t.Fatalf("basic auth: Apply reports it injected %q", injected)
	}

	// A template error never quotes the secret.
	_, err = e.Apply(r, Secret{"other": "leaky-value"})
	if err == nil || strings.Contains(err.Error(), "leaky-value") {
		t.Fatalf("Apply with a missing field = %v", err)
	}
}

func TestNewCatalogNamesTheField(t *testing.T) {
	_, err := NewCatalog([]Entry{{Name: "x", Source: Source{Kind: SourceKV, Path: "p"}, Inject: Injection{Kind: InjectHeader, Header: "A", Template: "{{.t}}"}}})
	if err == nil || !strings.Contains(err.Error(), "credentials[0] (x).hosts") {
		t.Fatalf("err = %v", err)
	}
}
