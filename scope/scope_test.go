package scope

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func mustParse(t *testing.T, in ...Scope) Set {
	t.Helper()
	s, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMatch(t *testing.T) {
	set := mustParse(t,
		Scope{Host: "api.github.com", Methods: []string{"get", "POST"}, Paths: []string{"/repos/acme/*"}, Credential: "github-ro"},
		Scope{Host: "*.pythonhosted.org"},
		Scope{Host: "bücher.example"},
		Scope{Host: "github.com", Ports: []int{22}, Tunnel: true},
		Scope{CIDR: "8.8.8.0/24", Ports: []int{53}},
	)
	tests := []struct {
		name string
		req  Request
		want string // matched scope host or cidr; "" means refused
	}{
		{"exact host, method and deep path", Request{"api.github.com", 443, "GET", "/repos/acme/x/y"}, "api.github.com"},
		{"path glob parent only", Request{"api.github.com", 443, "GET", "/repos/acme"}, ""},
		{"other org", Request{"api.github.com", 443, "GET", "/repos/evil/x"}, ""},
		{"dot-dot escape is cleaned", Request{"api.github.com", 443, "GET", "/repos/acme/../evil/x"}, ""},
		{"method not listed", Request{"api.github.com", 443, "DELETE", "/repos/acme/x"}, ""},
		{"default port 80", Request{"api.github.com", 80, "POST", "/repos/acme/x"}, "api.github.com"},
		{"port not covered", Request{"api.github.com", 8443, "GET", "/repos/acme/x"}, ""},
		{"wildcard one label", Request{"files.pythonhosted.org", 443, "GET", "/x"}, "*.pythonhosted.org"},
		{"wildcard two labels refused", Request{"a.b.pythonhosted.org", 443, "GET", "/x"}, ""},
		{"wildcard apex refused", Request{"pythonhosted.org", 443, "GET", "/"}, ""},
		{"suffix trick refused", Request{"evilpythonhosted.org", 443, "GET", "/"}, ""},
		{"idn in punycode", Request{"xn--bcher-kva.example", 443, "GET", "/"}, "xn--bcher-kva.example"},
		{"tunnel port", Request{"github.com", 22, "", ""}, "github.com"},
		{"tunnel scope not on 443", Request{"github.com", 443, "GET", "/"}, ""},
		{"cidr", Request{"8.8.8.8", 53, "", ""}, "8.8.8.0/24"},
		{"cidr other port", Request{"8.8.8.8", 443, "", ""}, ""},
		{"host scope does not cover an address", Request{"140.82.112.3", 443, "GET", "/"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := set.Match(tt.req)
			got := ""
			if ok {
				got = s.Host + s.CIDR
			}
			if got != tt.want {
				t.Fatalf("Match(%+v) = %q, want %q", tt.req, got, tt.want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name string
		in   Scope
	}{
		{"empty", Scope{}},
		{"both", Scope{Host: "a.example", CIDR: "8.8.8.0/24"}},
		{"private cidr", Scope{CIDR: "10.0.0.0/8"}},
		{"cidr covering loopback", Scope{CIDR: "0.0.0.0/0"}},
		{"metadata cidr", Scope{CIDR: "169.254.169.254/32"}},
		{"ip as host", Scope{Host: "127.0.0.1"}},
		{"bare wildcard", Scope{Host: "*.com"}},
		{"bad port", Scope{Host: "a.example", Ports: []int{70000}}},
		{"relative path", Scope{Host: "a.example", Paths: []string{"x"}}},
		{"tunnel without port", Scope{Host: "a.example", Tunnel: true}},
		{"bad glob", Scope{Host: "a.example", Paths: []string{"/["}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse([]Scope{tt.in}); err == nil {
				t.Fatalf("Parse(%+v) accepted", tt.in)
			}
		})
	}
}

func TestIsPublicAddr(t *testing.T) {
	tests := []struct {
		addr string
		want bool
	}{
		{"8.8.8.8", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"10.1.2.3", false},
		{"172.20.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"224.0.0.1", false},
		{"0.0.0.0", false},
		{"::1", false},
		{"::", false},
		{"fd00::1", false},
		{"fe80::1", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"64:ff9b::808:808", true},
		{"2002:a9fe:a9fe::1", false},
		{"2002:808:808::1", true},
		{"::127.0.0.1", false},
		{"fe80::1%eth0", false},
		{"::1%lo", false},
		{"fd00::1%1", false},
		{"::ffff:169.254.169.254%eth0", false},
		{"2606:4700::1111%eth0", false}, // a zone on a global address scopes it to a link: not a destination
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			if got := IsPublicAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("IsPublicAddr(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestParseAllow(t *testing.T) {
	s, err := ParseAllow("API.example.test:8443=demo")
	if err != nil || s.Host != "api.example.test" || len(s.Ports) != 1 || s.Ports[0] != 8443 || s.Credential != "demo" {
		t.Fatalf("ParseAllow = %+v, %v", s, err)
	}
	for _, bad := range []string{"", "a.example:x", "10.0.0.1", "*.com=x"} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

func TestCanonicalHostIPForms(t *testing.T) {
	tests := map[string]string{
		"2130706433":          "127.0.0.1",
		"0177.0.0.1":          "127.0.0.1",
		"0x7f.0.0.1":          "127.0.0.1",
		"0x7f000001":          "127.0.0.1",
		"127.1":               "127.0.0.1",
		"10.1":                "10.0.0.1",
		"169.254.43518":       "169.254.169.254",
		"0xa9.0xfe.0xa9.0xfe": "169.254.169.254",
		"[::ffff:7f00:1]":     "127.0.0.1",
		"[::1]":               "::1",
		"Example.COM.":        "example.com",
		"1.2.3.4.5":           "1.2.3.4.5",
		"08.1.2.3":            "08.1.2.3", // not octal: stays a name
	}
	for in, want := range tests {
		if got, err := CanonicalHost(in); err != nil || got != want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// A zone names one of this host's links: never a destination, whatever the address.
	for _, in := range []string{"[fe80::1%eth0]", "fe80::1%eth0", "[::1%lo]", "[2606:4700::1111%eth0]", "[::ffff:127.0.0.1%lo]"} {
		if got, err := CanonicalHost(in); err == nil || !strings.Contains(err.Error(), "zone") {
			t.Errorf("CanonicalHost(%q) = %q, %v; want refused for its zone", in, got, err)
		}
	}
}

func TestCheckPath(t *testing.T) {
	ok := []string{"/", "/v1/x", "/v1/x/", "/a%20b", "/%7Euser", "/a;b=c/d", "/100%25", "/x.y/z..w/.hidden", "/%C3%A9"}
	for _, p := range ok {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	bad := []string{"", "*", "v1/x", "//", "/a//b", "/a/./b", "/a/../b", "/..", "/a/.", "/a/..;x/b", "/a\\b",
		"/%2e%2e/x", "/%2E/x", "/a%2fb", "/a%2Fb", "/a%5cb", "/a%00", "/a%", "/a%2", "/a%zz", "/%252e", "/%25%32%66", "/%2541"}
	for _, p := range bad {
		err := CheckPath(p)
		if err == nil || !errors.Is(err, ErrPath) {
			t.Errorf("CheckPath(%q) = %v, want an ErrPath", p, err)
		}
	}
	// Match refuses them too, whoever calls it.
	set := mustParse(t, Scope{Host: "a.example", Paths: []string{"/v1/*"}}, Scope{Host: "b.example"})
	for _, p := range []string{"/v1/../admin", "/v1/%2e%2e/admin", "/v1//x", ""} {
		if _, ok := set.Match(Request{Host: "a.example", Port: 443, Method: "GET", Path: p}); ok {
			t.Errorf("Match allowed the path %q under /v1/*", p)
		}
	}
	if _, ok := set.Match(Request{Host: "b.example", Port: 443, Method: "GET", Path: "/a/../b"}); !ok {
		t.Error("a scope without paths must not look at the path")
	}
}

func TestProfiles(t *testing.T) {
	p := Builtin()
	for _, name := range []string{"pypi", "maven", "crates", "rubygems", "github-read"} {
		if len(p[name]) == 0 {
			t.Errorf("no built-in profile %s", name)
		}
	}
	set, err := p.Expand([]string{"pypi", "pypi", "github-read"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range set {
		if s.Profile != "pypi" && s.Profile != "github-read" {
			t.Fatalf("scope %s not tagged with its profile: %q", s, s.Profile)
		}
	}
	if s, ok := set.Match(Request{Host: "pypi.org", Port: 443, Method: "GET", Path: "/simple/x/"}); !ok || s.Profile != "pypi" {
		t.Fatalf("pypi.org GET = %v %v", s, ok)
	}
	// Read only: no upload to PyPI, no push to GitHub.
	for _, r := range []Request{
		{Host: "upload.pypi.org", Port: 443, Method: "POST", Path: "/legacy/"},
		{Host: "pypi.org", Port: 443, Method: "POST", Path: "/legacy/"},
		{Host: "github.com", Port: 443, Method: "POST", Path: "/acme/repo.git/git-receive-pack"},
		{Host: "github.com", Port: 80, Method: "GET", Path: "/"},
	} {
		if s, ok := set.Match(r); ok {
			t.Errorf("%+v allowed by %s", r, s)
		}
	}
	if _, ok := set.Match(Request{Host: "github.com", Port: 443, Method: "POST", Path: "/acme/repo.git/git-upload-pack"}); !ok {
		t.Error("a git fetch from GitHub is refused")
	}
	if _, err := p.Expand([]string{"nope"}); err == nil || !strings.Contains(err.Error(), `profile "nope" is not defined here`) || !strings.Contains(err.Error(), "pypi") {
		t.Fatalf("unknown profile = %v", err)
	}
}
