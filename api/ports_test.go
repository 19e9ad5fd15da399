package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/scope"
)

// sitePage is a sandbox's web page that tries to take another exposed port's capability: it
// sets cookies under the capability's names, and records the cookies it is sent.
type sitePage struct {
	mu      sync.Mutex
	cookies []string
	set     []string // Set-Cookie values it answers with
}

func (p *sitePage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.cookies = append(p.cookies, r.Header.Get("Cookie"))
	for _, c := range p.set {
		w.Header().Add("Set-Cookie", c)
	}
	p.mu.Unlock()
	io.WriteString(w, "page")
}

func (p *sitePage) sawCookies() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.cookies, "|")
}

// An exposed port's capability cookie cannot be read or overwritten by another exposed port or
// sandbox: not sent on to any sandbox, not settable by one, on a loopback API not even shared by
// host, and elsewhere bound by name to its own listener.
func TestPortCookieIsolated(t *testing.T) {
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			if l, err := net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
				t.Skipf("no %s here: %v", host, err)
			} else {
				l.Close()
			}
			portCookieIsolation(t, host)
		})
	}
}

func portCookieIsolation(t *testing.T, host string) {
	// The sandboxes' pages listen on the host itself, standing in for sandbox addresses.
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Runtime: func(rt *pooltest.Runtime) { rt.Addr = netip.MustParseAddr(host) }})
	iss, m := e.Issuer, e.Manager
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(api.Config{Pool: m, Logger: quiet, PortHost: host, Keys: map[string]string{api.HashKey("k"): "acme"}}))
	defer srv.Close()
	e.MustWarm(t, 2)
	apiCall := func(method, path, body string, out any) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %v %v", method, path, resp, err)
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(out)
	}
	expose := func(page *sitePage) string {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		s := &http.Server{Handler: page}
		go s.Serve(l)
		t.Cleanup(func() { s.Close() })
		tok, _ := iss.Mint("task", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		var lease api.LeaseView
		apiCall("POST", "/v1/leases", `{"token":"`+tok+`"}`, &lease)
		var pv api.PortView
		apiCall("POST", "/v1/leases/"+lease.ID+"/ports", `{"port":`+strconv.Itoa(l.Addr().(*net.TCPAddr).Port)+`}`, &pv)
		return pv.URL
	}
	a, b := &sitePage{}, &sitePage{}
	aURL := expose(a)
	bURL := expose(b)
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(u string) int {
		t.Helper()
		resp, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(aURL); st != 200 {
		t.Fatalf("port A through its capability URL: %d", st)
	}
	aPort := strings.Split(strings.TrimPrefix(aURL, "http://"), "/")[0]
	_, aPortNum, _ := net.SplitHostPort(aPort)
	// B's page tries to overwrite and shadow A's capability cookie.
	b.mu.Lock()
	b.set = []string{"airlock_port_" + aPortNum + "=evil; Path=/", "airlock_port_" + aPortNum + "=evil; Path=/deep",
		"AIRLOCK_PORT_" + aPortNum + "=evil", "airlock_port=evil"}
	b.mu.Unlock()
	if st := get(bURL); st != 200 {
		t.Fatalf("port B through its capability URL: %d", st)
	}
	for _, u := range []string{"http://" + aPort + "/", "http://" + aPort + "/deep"} {
		if st := get(u); st != 200 {
			t.Fatalf("port A after B's page tried to overwrite its cookie: %s answered %d", u, st)
		}
	}
	for name, page := range map[string]*sitePage{"A": a, "B": b} {
		if c := page.sawCookies(); strings.Contains(strings.ToLower(c), "airlock_port") {
			t.Fatalf("sandbox %s was sent a capability cookie: %q", name, c)
		}
	}
}

// TestPortsBoundedAndEndWithLease: a lease exposes at most the configured number of ports, even
// asked concurrently (the same port again is the same URL, not another listener), and the
// listeners close when the lease ends, here by expiry.
func TestPortsBoundedAndEndWithLease(t *testing.T) {
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Runtime: func(rt *pooltest.Runtime) { rt.Addr = netip.MustParseAddr("127.0.0.1") }})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(api.New(api.Config{Pool: e.Manager, Logger: quiet, PortHost: "127.0.0.1",
		MaxPortsPerLease: 3, PortSweep: 50 * time.Millisecond, Keys: map[string]string{api.HashKey("k"): "acme"}}))
	defer srv.Close()
	e.MustWarm(t, 2)
	call := func(method, path, body string, out any) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if out != nil {
			json.NewDecoder(resp.Body).Decode(out)
		}
		return resp.StatusCode
	}
	lease := func(ttl string) string {
		tok, _ := e.Issuer.Mint("task-ports-"+ttl, "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
		var l api.LeaseView
		if st := call("POST", "/v1/leases", `{"token":"`+tok+`","ttl":"`+ttl+`"}`, &l); st != http.StatusCreated {
			t.Fatalf("lease: %d", st)
		}
		return l.ID
	}
	expose := func(id string, port int) (int, api.PortView) {
		var pv api.PortView
		return call("POST", "/v1/leases/"+id+"/ports", `{"port":`+strconv.Itoa(port)+`}`, &pv), pv
	}

	a := lease("10m")
	urls := map[string]bool{}
	for port := 8001; port <= 8003; port++ {
		st, pv := expose(a, port)
		if st != http.StatusCreated || urls[pv.URL] {
			t.Fatalf("exposing port %d: %d %q", port, st, pv.URL)
		}
		urls[pv.URL] = true
	}
	if st, pv := expose(a, 8001); st != http.StatusCreated || !urls[pv.URL] {
		t.Fatalf("exposing port 8001 again: %d %q, want its first URL", st, pv.URL)
	}
	var refusal struct {
		Error struct{ Code, Message string }
	}
	if st := call("POST", "/v1/leases/"+a+"/ports", `{"port":8004}`, &refusal); st != http.StatusTooManyRequests ||
		refusal.Error.Code != "too_many_ports" || !strings.Contains(refusal.Error.Message, "api.max_ports_per_lease") {
		t.Fatalf("a fourth port: %d %+v", st, refusal)
	}

	// Concurrent requests cannot slip past the bound; and the lease's expiry closes them.
	b := lease("2s")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var exposed []string
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, pv := expose(b, 9000+i); st == http.StatusCreated {
				mu.Lock()
				exposed = append(exposed, strings.Split(strings.TrimPrefix(pv.URL, "http://"), "/")[0])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(exposed) != 3 {
		t.Fatalf("20 concurrent exposures made %d listeners, want 3", len(exposed))
	}
	open := func() int {
		n := 0
		for _, hp := range exposed {
			if c, err := net.DialTimeout("tcp", hp, time.Second); err == nil {
				c.Close()
				n++
			}
		}
		return n
	}
	if n := open(); n != 3 {
		t.Fatalf("control: %d of 3 listeners answer", n)
	}
	if err := wait.Until(10*time.Second, "the lease's listeners to close (it was to end 2s after it began)", func() bool { return open() == 0 }); err != nil {
		t.Fatalf("%v: %d listeners still open", err, open())
	}
}
