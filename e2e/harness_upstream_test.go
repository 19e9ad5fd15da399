package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file is the upstream the sandboxes reach through the gateway, and the listeners a probe
// that should have been refused would reach instead.

// upstream is the test's own HTTPS server behind the pinned name api.example.test. It records
// the Authorization and X-Vault-Token headers the gateway sent it, and counts the downloads of
// /slow that began and ended.
type upstream struct {
	srv        *httptest.Server
	registry   *registry
	mu         sync.Mutex
	auth       []string
	vaultToken []string
	slowBegan  atomic.Int64
	slowEnded  atomic.Int64
}

func newUpstream() (*upstream, error) {
	// One server answers for the API and for the package registries (registry_test.go).
	cert, err := selfSigned("api.example.test", mirrorHost, npmHost)
	if err != nil {
		return nil, err
	}
	u := &upstream{registry: newRegistry()}
	mux := http.NewServeMux()
	u.registry.routes(mux)
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.vaultToken = append(u.vaultToken, r.Header.Get("X-Vault-Token"))
		u.mu.Unlock()
		fmt.Fprintln(w, "upstream: whoami ok")
	})
	// /echo sends the request's Authorization header back: the gateway must scrub it.
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		fmt.Fprintf(w, "you sent: %s\n", r.Header.Get("Authorization"))
	})
	// /reflect sends the Authorization header back escaped as ?as= says, one escape per byte
	// (html: &#x..;, json: \u00.., pct: %.. in both cases), or as it is with Range honoured: the
	// gateway must scrub every escape and never let a range of it through.
	mux.HandleFunc("/reflect", func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		var b strings.Builder
		for i, c := range []byte(v) {
			switch r.URL.Query().Get("as") {
			case "html":
				fmt.Fprintf(&b, "&#x%X;", c)
			case "json":
				fmt.Fprintf(&b, `\u%04x`, c)
			case "pct":
				fmt.Fprintf(&b, [2]string{"%%%02x", "%%%02X"}[i%2], c)
			default:
				b.WriteByte(c)
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("you sent: "+b.String()+"\n"))
	})
	// /slow sends a line every 100 ms for a minute, or until its connection ends: a download
	// that is in flight for as long as a test needs one.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		u.slowBegan.Add(1)
		defer u.slowEnded.Add(1)
		rc := http.NewResponseController(w)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := range 600 {
			if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	})
	u.srv = httptest.NewUnstartedServer(mux)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	u.srv.StartTLS()
	return u, nil
}

// startUpstream is an upstream closed when t ends.
func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u, err := newUpstream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// vaultTokens is every X-Vault-Token the upstream received, oldest first.
func (u *upstream) vaultTokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.vaultToken...)
}

func (u *upstream) lastVaultToken(t *testing.T) string {
	t.Helper()
	toks := u.vaultTokens()
	if len(toks) == 0 {
		t.Fatal("the upstream has received no request")
	}
	return toks[len(toks)-1]
}

// arrivedBefore sends one marker of the test's own to each of the host's addresses given, and
// returns what arrived (from recordAccepts, or a reader of a UDP socket) before every marker
// did: a socket hands over connections and datagrams in the order they came, so once its marker
// is seen nothing a probe sent it earlier is still to come. TCP addresses are dialed; for UDP
// ones, pass "udp" as network.
func arrivedBefore(t *testing.T, arrived <-chan string, network string, addrs ...string) []string {
	t.Helper()
	markers := map[string]bool{}
	for _, a := range addrs {
		c, err := net.DialTimeout(network, a, 5*time.Second)
		if err != nil {
			t.Fatalf("the test's marker to %s: %v", a, err)
		}
		defer c.Close()
		if network == "udp" {
			if _, err := c.Write([]byte("marker")); err != nil {
				t.Fatalf("the test's marker to %s: %v", a, err)
			}
		}
		markers[c.LocalAddr().String()] = true
	}
	var before []string
	timeout := time.After(10 * time.Second)
	for len(markers) > 0 {
		select {
		case from := <-arrived:
			if markers[from] {
				delete(markers, from)
			} else {
				before = append(before, from)
			}
		case <-timeout:
			t.Fatalf("gave up after 10s waiting for the test's own markers to arrive (%v still to come)", markers)
		}
	}
	return before
}

// recordAccepts accepts on each listener until it is closed and sends the remote address of
// each connection (a probe that should have been refused) on the channel it returns.
func recordAccepts(ls ...net.Listener) <-chan string {
	accepted := make(chan string, 16)
	for _, l := range ls {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				select {
				case accepted <- c.RemoteAddr().String():
				default:
				}
				c.Close()
			}
		}()
	}
	return accepted
}
