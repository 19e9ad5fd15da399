package gateway

import (
	"crypto/tls"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/scope"
)

// gitServer is a real git smart-HTTP server (git-http-backend) behind the gateway's
// intercepted TLS, with bare repositories in root, and the git client to reach it through the
// gateway.
type gitServer struct {
	t    *testing.T
	h    *harness
	root string
	via  []string
}

func newGitServer(t *testing.T, scopes []scope.Scope, repos ...string) *gitServer {
	t.Helper()
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git-http-backend is missing (Debian's git): %v", err)
	}
	g := &gitServer{t: t, root: t.TempDir()}
	for _, r := range repos {
		g.git(g.root, "init", "-q", "--bare", r+".git")
		g.git(filepath.Join(g.root, r+".git"), "config", "http.receivepack", "true")
	}
	g.h = newHarness(t)
	g.h.scopes = scopes
	leaf, _ := g.h.ca.Leaf("api.example.test")
	srv := httptest.NewUnstartedServer(&cgi.Handler{Path: backend, Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=airlock"}})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()
	g.h.proxyHandler().dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	g.h.dialer.allowed[addr] = true
	proxyAddr := serveHarness(t, g.h)
	os.WriteFile(filepath.Join(g.root, "ca.pem"), g.h.ca.CertPEM, 0o644)
	g.via = []string{"-c", "http.proxy=http://" + proxyAddr, "-c", "user.email=t@example.test", "-c", "user.name=t"}
	return g
}

// run runs git in dir and returns its output and whether it succeeded.
func (g *gitServer) run(dir string, args ...string) (string, bool) {
	cmd := exec.Command("git", append(append([]string{}, g.via...), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "HOME="+g.root, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_SSL_CAINFO="+filepath.Join(g.root, "ca.pem"))
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func (g *gitServer) git(dir string, args ...string) string {
	g.t.Helper()
	out, ok := g.run(dir, args...)
	if !ok {
		g.t.Fatalf("git %v:\n%s", args, out)
	}
	return out
}

// refs lists the refs of a repository on the server, as its own git sees them.
func (g *gitServer) refs(repo string) string {
	cmd := exec.Command("git", "for-each-ref", "--format=%(refname) %(objectname)")
	cmd.Dir = filepath.Join(g.root, repo+".git")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestGitSmartHTTPThroughTheGateway clones from and pushes to a real git smart-HTTP server
// (git-http-backend) through the gateway's intercepted TLS, with the credential injected.
func TestGitSmartHTTPThroughTheGateway(t *testing.T) {
	g := newGitServer(t, []scope.Scope{{Host: "api.example.test", Credential: "demo"}}, "repo")
	h, root, git := g.h, g.root, g.git
	via := []string{}
	work := filepath.Join(root, "work")
	git(root, append(via, "clone", "-q", "https://api.example.test/repo.git", work)...)
	os.WriteFile(filepath.Join(work, "README"), []byte("through airlock\n"), 0o644)
	git(work, "add", "README")
	git(work, append(via, "commit", "-q", "-m", "first")...)
	git(work, append(via, "push", "-q", "origin", "HEAD:refs/heads/main")...)

	clone2 := filepath.Join(root, "clone2")
	git(root, append(via, "clone", "-q", "-b", "main", "https://api.example.test/repo.git", clone2)...)
	if b, _ := os.ReadFile(filepath.Join(clone2, "README")); string(b) != "through airlock\n" {
		t.Fatalf("pushed content did not come back: %q", b)
	}
	// Every exchange went through the gateway, with the credential.
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	n := 0
	for _, r := range h.sink.recs {
		if strings.HasPrefix(r.Path, "/repo.git/") && r.Credential == "demo" && r.Decision == "allow" {
			n++
		}
	}
	if n < 4 {
		t.Fatalf("only %d git requests recorded through the gateway", n)
	}
}

// A git scope limits pushes to its ref patterns, refuses deletions and whole pushes with any
// refused ref (no ref of them changes on the server), and fetches to its repositories; git
// prints the reason per ref.
func TestGitPushScopedByRef(t *testing.T) {
	g := newGitServer(t, []scope.Scope{{Host: "api.example.test", Credential: "demo",
		Git: &scope.Git{Repos: []string{"acme/app"}, Push: []string{"refs/heads/agent/*"}}}}, "acme/app", "acme/other")
	// The server's repository starts with a main branch the sandbox did not make.
	seed := filepath.Join(g.root, "seed")
	cmd := exec.Command("sh", "-c", "git init -q "+seed+" && cd "+seed+" && git -c user.email=s@x -c user.name=s commit -q --allow-empty -m seed && "+
		"git push -q "+filepath.Join(g.root, "acme/app.git")+" HEAD:refs/heads/main")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("seeding: %v %s", err, out)
	}
	work := filepath.Join(g.root, "work")
	g.git(g.root, "clone", "-q", "-b", "main", "https://api.example.test/acme/app.git", work)
	os.WriteFile(filepath.Join(work, "f"), []byte("agent work\n"), 0o644)
	g.git(work, "add", "f")
	g.git(work, "commit", "-q", "-m", "agent")

	g.git(work, "push", "-q", "origin", "HEAD:refs/heads/agent/x")
	if !strings.Contains(g.refs("acme/app"), "refs/heads/agent/x") {
		t.Fatalf("an allowed push did not land: %s", g.refs("acme/app"))
	}
	before := g.refs("acme/app")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a push to main", []string{"push", "origin", "HEAD:refs/heads/main"}, "outside refs/heads/agent/*"},
		{"agent/y with main", []string{"push", "origin", "HEAD:refs/heads/agent/y", "HEAD:refs/heads/main"}, "the push is refused whole"},
		{"a tag", []string{"push", "origin", "HEAD:refs/tags/v1"}, "outside refs/heads/agent/*"},
		{"a deletion", []string{"push", "origin", ":refs/heads/agent/x"}, "deleting refs is not allowed"},
		{"an atomic push", []string{"push", "--atomic", "origin", "HEAD:refs/heads/agent/z", "HEAD:refs/heads/main"}, "airlock"},
	} {
		out, ok := g.run(work, tc.args...)
		if ok || !strings.Contains(out, tc.want) || !strings.Contains(out, "[remote rejected]") {
			t.Errorf("%s: git succeeded=%v, printed:\n%s\nwant a remote rejection saying %q", tc.name, ok, out, tc.want)
		}
		if after := g.refs("acme/app"); after != before {
			t.Fatalf("%s changed the server's refs:\n%s\nwas:\n%s", tc.name, after, before)
		}
		t.Logf("%s: git printed:\n%s", tc.name, out)
	}
	// Fetches reach the listed repositories only.
	if out, ok := g.run(g.root, "clone", "-q", "https://api.example.test/acme/other.git", filepath.Join(g.root, "other")); ok ||
		!strings.Contains(out, "403") {
		t.Errorf("a clone of a repository the scope does not list: ok=%v\n%s", ok, out)
	}
	// The records say what each push did, or why it was refused (written as each answer
	// ends: waited for, bounded).
	var pushed, refused, other bool
	wait.Until(10*time.Second, "the records of the pushes and the clone", func() bool {
		g.h.sink.mu.Lock()
		defer g.h.sink.mu.Unlock()
		for _, r := range g.h.sink.recs {
			pushed = pushed || r.Decision == "allow" && r.Credential == "demo" && strings.Contains(r.Reason, "git push acme/app: refs/heads/agent/x (create)")
			refused = refused || r.Decision == "deny" && r.Rule == "git" && strings.Contains(r.Reason, "refs/heads/main outside")
			other = other || r.Decision == "deny" && r.Rule == "git" && strings.Contains(r.Reason, "does not cover repository acme/other")
		}
		return pushed && refused && other
	})
	if !pushed || !refused || !other {
		t.Errorf("records: allowed push %v, refused push %v, other repository %v", pushed, refused, other)
	}
}
