package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// teeSink passes every record to inner, as a tee or a filter in front of the trail would. It is
// no audit.Checker itself: only its Unwrap leads to one.
type teeSink struct {
	inner audit.Sink
}

func (s *teeSink) Write(ctx context.Context, r audit.Record) error { return s.inner.Write(ctx, r) }
func (s *teeSink) Unwrap() audit.Sink                              { return s.inner }

var (
	_ audit.Sink      = (*teeSink)(nil)
	_ audit.Unwrapper = (*teeSink)(nil)
)

// The fail-closed check of the trail survives wrapping: with the sink behind a wrapper saying a
// write would fail, a request and a tunnel are refused as the trail's failure, and nothing is
// dialed; with it healthy, the same request passes through the wrapper.
func TestAuditCheckThroughAWrappedSink(t *testing.T) {
	setup := func(t *testing.T) *harness {
		h := newHarness(t)
		h.setScopes([]scope.Scope{{Host: "api.example.test", Credential: "demo"}, {Host: "git.example.test", Ports: []int{22}, Tunnel: true}})
		p := h.proxyHandler()
		p.cfg.Audit = &teeSink{inner: &teeSink{inner: h.sink}}
		p.dyn.Load().pins["git.example.test:22"] = netip.MustParseAddrPort("127.0.0.1:9")
		return h
	}
	down := fmt.Errorf("%w: disk full", audit.ErrUnavailable)

	t.Run("healthy: a request passes", func(t *testing.T) {
		h := setup(t)
		resp, err := h.client().Get("https://api.example.test/v1/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("down: a request is refused", func(t *testing.T) {
		h := setup(t)
		h.sink.err = down
		resp, err := h.client().Get("https://api.example.test/v1/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.AuditDown {
			t.Fatalf("status %d rule %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
		if n := h.asked.Load(); n != 0 {
			t.Fatalf("the broker was asked %d times for a request the trail could not record", n)
		}
	})
	t.Run("down: a tunnel is refused", func(t *testing.T) {
		h := setup(t)
		h.sink.err = down
		c := dialTimed(t, h.proxy.Listener.Addr().String())
		fmt.Fprintf(c, "CONNECT git.example.test:22 HTTP/1.1\r\nHost: git.example.test:22\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || rule.Rule(resp.Header.Get("X-Airlock-Rule")) != rule.AuditDown {
			t.Fatalf("status %d rule %q", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
		if h.dialer.saw("127.0.0.1:9") {
			t.Fatal("the refused tunnel dialed its upstream")
		}
	})
}
