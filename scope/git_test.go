package scope

import "testing"

// A git scope's repositories and ref patterns are checked when the token is read.
func TestGitScopeParse(t *testing.T) {
	good, err := Parse([]Scope{{Host: "github.com", Git: &Git{Repos: []string{"/acme/app.git"}, Push: []string{"refs/heads/agent/*"}}}})
	if err != nil || good[0].Git.Repos[0] != "acme/app" {
		t.Fatalf("a git scope: %v %+v", err, good)
	}
	for name, g := range map[string]*Git{
		"no repo":          {},
		"a dot segment":    {Repos: []string{"acme/../other"}},
		"an escape":        {Repos: []string{"acme/%2e%2e"}},
		"a ref not a ref":  {Repos: []string{"a/b"}, Push: []string{"main"}},
		"a broken pattern": {Repos: []string{"a/b"}, Push: []string{"refs/heads/["}},
	} {
		if _, err := Parse([]Scope{{Host: "github.com", Git: g}}); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := Parse([]Scope{{Host: "github.com", Ports: []int{443}, Tunnel: true, Git: &Git{Repos: []string{"a/b"}}}}); err == nil {
		t.Error("a git scope on an uninspected tunnel parsed")
	}
}

// Smart HTTP requests name their repository and service; nothing else is a git request.
func TestGitRequest(t *testing.T) {
	for _, tc := range []struct {
		method, path, query, repo, service string
	}{
		{"GET", "/acme/app.git/info/refs", "service=git-upload-pack", "acme/app", GitUploadPack},
		{"GET", "/acme/app/info/refs", "service=git-receive-pack", "acme/app", GitReceivePack},
		{"POST", "/acme/app.git/git-receive-pack", "", "acme/app", GitReceivePack},
		{"POST", "/acme/app.git/git-upload-pack", "", "acme/app", GitUploadPack},
		{"GET", "/acme/app.git/info/refs", "", "", ""},                                      // the dumb protocol
		{"GET", "/acme/app.git/info/refs", "service=git-upload-pack&x=1", "", ""},           // anything more
		{"GET", "/acme/app.git/git-upload-pack", "", "", ""},                                // a POST service
		{"GET", "/acme/app.git/objects/info/packs", "", "", ""},                             // dumb
		{"POST", "/acme/%2e%2e/app.git/git-receive-pack", "", "", ""},                       // an escape
		{"POST", "/git-receive-pack", "", "", ""},                                           // no repository
		{"GET", "/repos/acme/app/contents/x", "", "", ""},                                   // an API call
		{"POST", "/acme/app.git/git-receive-pack/../../other/git-receive-pack", "", "", ""}, // dot segments
	} {
		repo, service, ok := GitRequest(tc.method, tc.path, tc.query)
		if repo != tc.repo || service != tc.service || ok != (tc.repo != "") {
			t.Errorf("%s %s?%s: %q %q %v, want %q %q", tc.method, tc.path, tc.query, repo, service, ok, tc.repo, tc.service)
		}
	}
	g := &Git{Repos: []string{"acme/app"}, Push: []string{"refs/heads/agent/*", "refs/heads/fix-?"}}
	for ref, want := range map[string]bool{
		"refs/heads/agent/x": true, "refs/heads/agent/x/y": true, "refs/heads/agent": false,
		"refs/heads/main": false, "refs/tags/v1": false, "refs/heads/fix-1": true, "refs/heads/fix-12": false,
	} {
		if g.AllowsRef(ref) != want {
			t.Errorf("AllowsRef(%q) = %v", ref, !want)
		}
	}
	if !g.AllowsRepo("acme/app") || g.AllowsRepo("ACME/App") || g.AllowsRepo("acme/app2") {
		t.Error("repositories compare exactly (a server that tells case apart has ACME/App as another repository)")
	}
}

// Parsing never changes the scopes it is given: a binding's scopes are parsed again while
// requests read them.
func TestParseLeavesItsInputAlone(t *testing.T) {
	in := []Scope{{Host: "a.example", Methods: []string{"get"}, Approval: Approval{On: true, Methods: []string{"post"}},
		Git: &Git{Repos: []string{"/acme/app.git"}, Push: []string{"refs/heads/*"}}, MCP: nil}}
	if _, err := Parse(in); err != nil {
		t.Fatal(err)
	}
	if in[0].Methods[0] != "get" || in[0].Approval.Methods[0] != "post" || in[0].Git.Repos[0] != "/acme/app.git" {
		t.Fatalf("Parse changed its input: %+v %+v %+v", in[0].Methods, in[0].Approval, in[0].Git)
	}
}

// An approval holds a method in any case: the scope allows every method, and an upstream may read
// "post" as POST.
func TestApprovalHoldsMethodInAnyCase(t *testing.T) {
	a := Approval{On: true, Methods: []string{"POST"}, Paths: []string{"/deploy/*"}}
	for _, m := range []string{"POST", "post", "Post"} {
		if !a.Holds(m, "/deploy/x") {
			t.Errorf("%s /deploy/x is not held", m)
		}
	}
	if a.Holds("GET", "/deploy/x") || a.Holds("POST", "/other") {
		t.Error("an approval holds what it does not name")
	}
}
