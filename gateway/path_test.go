package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// What the scope checked is what goes upstream: paths that servers would resolve to another
// path are refused before anything is sent, whether they come intercepted (with the credential
// at stake) or in plain absolute form.
func TestAmbiguousPathsRefused(t *testing.T) {
	attacks := []string{
		"/v1/%2e%2e/admin", "/v1/%2E%2E/admin", "/v1/.%2e/admin", "/v1//../admin", "/v1/x/../../admin",
		"/v1/./x", "/v1/..;/admin", "/v1/x/..;jsessionid=1/admin", "/v1/%2fadmin", "/v1/%2Fadmin",
		"/v1/%5c..%5cadmin", "/v1/%00", "/v1/%252e%252e/admin", "/v1/%25%32%65", "/v1/%2541", "//v1/x",
	}
	for _, p := range attacks {
		t.Run("https "+p, func(t *testing.T) {
			h := newHarness(t)
			status, got := rawIntercepted(t, h, "GET "+p+" HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
			if status != http.StatusBadRequest || got != rule.AmbiguousPath {
				t.Fatalf("%s: status %d rule %q, want 400 %s", p, status, got, rule.AmbiguousPath)
			}
			if got := h.received(); len(got) > 0 {
				t.Fatalf("%s reached the upstream as %v", p, got)
			}
			if rec := h.sink.last(); rec.Rule != rule.AmbiguousPath || rec.Path != p || rec.Credential != "" {
				t.Fatalf("audit record %+v", rec)
			}
		})
		t.Run("http "+p, func(t *testing.T) {
			h := newHarness(t)
			status, got := rawPlain(t, h, "GET http://plain.example.test"+p+" HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
			if status != http.StatusBadRequest || got != rule.AmbiguousPath {
				t.Fatalf("%s: status %d rule %q", p, status, got)
			}
			if got := h.received(); len(got) > 0 {
				t.Fatalf("%s reached the upstream as %v", p, got)
			}
		})
	}
	t.Run("absolute form with an empty path", func(t *testing.T) {
		h := newHarness(t)
		status, got := rawPlain(t, h, "GET http://plain.example.test HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
		if status != http.StatusBadRequest || got != rule.AmbiguousPath || len(h.received()) > 0 {
			t.Fatalf("empty path: status %d rule %q, upstream saw %v", status, got, h.received())
		}
	})
}

// Plain paths pass, and the upstream receives byte for byte the path that was matched and
// recorded; the query is never matched and never changes the path.
func TestPathSentIsPathMatched(t *testing.T) {
	cases := []struct {
		target string // request target sent by the sandbox
		status int
		path   string // path the upstream receives (and the record names)
	}{
		{"/v1/x", 200, "/v1/x"},
		{"/v1/a%20b/%7Euser", 200, "/v1/a%20b/%7Euser"},
		{"/v1/x/", 200, "/v1/x/"},
		{"/v1/x?next=/../../admin", 200, "/v1/x"},
		{"/v1/x?%2e%2e/admin", 200, "/v1/x"},
		{"/admin?x=/v1/y", 403, ""},
		{"/v1x", 403, ""},
		{"/V1/x", 403, ""},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			h := newHarness(t)
			status, _ := rawPlain(t, h, "GET http://plain.example.test"+c.target+" HTTP/1.1\r\nHost: plain.example.test\r\n\r\n")
			if status != c.status {
				t.Fatalf("status %d, want %d", status, c.status)
			}
			got := h.received()
			if c.status != 200 {
				if len(got) > 0 {
					t.Fatalf("refused request reached the upstream: %v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("upstream saw %v", got)
			}
			sent, _, _ := strings.Cut(got[0], "?")
			rec := h.sink.last()
			if sent != c.path || rec.Path != c.path || rec.Decision != audit.Allow {
				t.Fatalf("sent %q, recorded %q (%s), want %q for both", sent, rec.Path, rec.Decision, c.path)
			}
		})
	}
}

// rawPlain sends one raw request to the proxy and returns the status and rule header.
func rawPlain(t *testing.T, h *harness, req string) (int, rule.Rule) {
	t.Helper()
	c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	resp.Body.Close()
	return resp.StatusCode, rule.Rule(resp.Header.Get("X-Airlock-Rule"))
}

// rawIntercepted sends one raw request inside an intercepted CONNECT to h.target (default
// api.example.test:443).
func rawIntercepted(t *testing.T, h *harness, req string) (int, rule.Rule) {
	t.Helper()
	target := h.target
	if target == "" {
		target = "api.example.test:443"
	}
	tc := h.intercept(t, target)
	fmt.Fprint(tc, req)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", req, err)
	}
	resp.Body.Close()
	return resp.StatusCode, rule.Rule(resp.Header.Get("X-Airlock-Rule"))
}

// FuzzPathMatchedIsPathSent: for any request target, a request the gateway lets through reaches
// the upstream with exactly the path the gateway matched and recorded.
func FuzzPathMatchedIsPathSent(f *testing.F) {
	for _, s := range []string{"/v1/x", "/v1/%2e%2e/admin", "/v1//x", "/v1/a%20b", "/v1/x?y=/../z", "/v1/..;/a",
		"/v1/%25", "/v1/é", "/v1/x#frag", "/v1/%7e", "/v1/*", "/v1/x;y", "*"} {
		f.Add(s)
	}
	h := newHarness(f)
	f.Fuzz(func(t *testing.T, target string) {
		if strings.ContainsAny(target, " \r\n") || target == "" {
			return // not one request line
		}
		before, n := len(h.received()), h.sink.count()
		c, err := net.Dial("tcp", h.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://plain.example.test%s HTTP/1.1\r\nHost: plain.example.test\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return // refused by net/http itself
		}
		resp.Body.Close()
		got := h.received()[before:]
		if resp.StatusCode != 200 {
			if len(got) > 0 {
				t.Fatalf("%q was answered %d but reached the upstream as %v", target, resp.StatusCode, got)
			}
			return
		}
		rec, ok := h.sink.nth(n)
		if !ok {
			t.Fatalf("%q: no audit record", target)
		}
		if len(got) != 1 {
			t.Fatalf("%q: upstream saw %v", target, got)
		}
		sent, _, _ := strings.Cut(got[0], "?")
		if sent != rec.Path {
			t.Fatalf("%q: matched and recorded %q, sent %q", target, rec.Path, sent)
		}
		if !strings.HasPrefix(sent, "/v1/") {
			t.Fatalf("%q: sent %q, outside the scope's /v1/*", target, sent)
		}
	})
}

// connectStatus sends a CONNECT for target on c and returns the status and rule header.
func connectStatus(t *testing.T, c net.Conn, target string) (int, rule.Rule) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp.StatusCode, rule.Rule(resp.Header.Get("X-Airlock-Rule"))
}
