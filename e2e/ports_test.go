package e2e

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReviewedPorts: a port of the sandbox shown to a reviewer is served on a listener of its own,
// only with its capability and only until release, and a lease shows a bounded number of them.
func TestReviewedPorts(t *testing.T) {
	eachRuntime(t, sharedNode(t), func(t *testing.T, n *shared) {
		t.Run("a reviewed port is served on its own listener, with a capability, until release", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			if _, errs, code := n.exec(t, a.ID, "sh", "-c",
				"mkdir -p /workspace/site && echo review-me > /workspace/site/index.html && cd /workspace/site && "+
					"nohup python3 -m http.server 8000 >/tmp/site.log 2>&1 & for i in 1 2 3 4 5 6 7 8 9 10; do curl --noproxy '*' -s -o /dev/null http://127.0.0.1:8000/ && exit 0; sleep 0.3; done; exit 1"); code != 0 {
				t.Fatalf("starting the site: %s", errs)
			}
			out, errs, code := n.cli(t, "port", a.ID, "8000")
			if code != 0 {
				t.Fatalf("airlock port: %s", errs)
			}
			u := strings.TrimSpace(out)
			if strings.Contains(u, strings.TrimPrefix(n.client.Addr, "http://")) {
				t.Fatalf("the port shares the API's origin: %s", u)
			}
			jar, _ := cookiejar.New(nil)
			hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
			resp, err := hc.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "review-me\n" {
				t.Fatalf("through the port URL: %d %q", resp.StatusCode, body)
			}
			base, _ := url.Parse(u)
			base.RawQuery = ""
			if resp, err := http.Get(base.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("without the capability: %v %v", resp, err)
			}
			forged := *base
			forged.RawQuery = "airlock_port=" + strings.Repeat("0", 48)
			if resp, err := http.Get(forged.String()); err != nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("with a forged capability: %v %v", resp, err)
			}
			if _, errs, code := n.cli(t, "release", a.ID); code != 0 {
				t.Fatalf("release: %s", errs)
			}
			if resp, err := http.Get(u); err == nil {
				resp.Body.Close()
				t.Fatalf("the reviewed port still answers after release: %d", resp.StatusCode)
			}
		})

		t.Run("a lease exposes a bounded number of ports", func(t *testing.T) {
			a := n.lease(t, "api.example.test")
			first := ""
			for port := 9001; port <= 9008; port++ {
				out, errs, code := n.cli(t, "port", a.ID, strconv.Itoa(port))
				if code != 0 {
					t.Fatalf("exposing port %d of the default 8: %s", port, errs)
				}
				if port == 9001 {
					first = strings.TrimSpace(out)
				}
			}
			if out, _, code := n.cli(t, "port", a.ID, "9001"); code != 0 || strings.TrimSpace(out) != first {
				t.Errorf("exposing port 9001 again: exit %d %q, want its first URL %q", code, out, first)
			}
			if _, errs, code := n.cli(t, "port", a.ID, "9009"); code == 0 || !strings.Contains(errs, "max_ports_per_lease") {
				t.Fatalf("a ninth port: exit %d %s", code, errs)
			}
		})
	})
}
