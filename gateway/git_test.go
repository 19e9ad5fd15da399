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

	"github.com/airlock-dev/airlock/scope"
)

// TestGitSmartHTTPThroughTheGateway clones from and pushes to a real git smart-HTTP server
// (git-http-backend) through the gateway's intercepted TLS, with the credential injected.
func TestGitSmartHTTPThroughTheGateway(t *testing.T) {
	backend := "/usr/lib/git-core/git-http-backend"
	if _, err := os.Stat(backend); err != nil {
		t.Fatalf("git-http-backend is missing (Debian's git): %v", err)
	}
	root := t.TempDir()
	caFile := filepath.Join(root, "ca.pem")
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "HOME="+root, "GIT_CONFIG_NOSYSTEM=1", "GIT_SSL_CAINFO="+caFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git(root, "init", "-q", "--bare", "repo.git")
	git(filepath.Join(root, "repo.git"), "config", "http.receivepack", "true")

	h := newHarness(t)
	h.scopes = []scope.Scope{{Host: "api.example.test", Credential: "demo"}}
	leaf, _ := h.ca.Leaf("api.example.test")
	srv := httptest.NewUnstartedServer(&cgi.Handler{Path: backend, Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=airlock"}})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	h.proxyHandler().dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	h.dialer.allowed[addr] = true
	proxyAddr := serveHarness(t, h)
	os.WriteFile(caFile, h.ca.CertPEM, 0o644)
	via := []string{"-c", "http.proxy=http://" + proxyAddr, "-c", "user.email=t@example.test", "-c", "user.name=t"}

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
