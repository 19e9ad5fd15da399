package review

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/slots"
)

func withStreams(l slots.Limits) func(*Config) { return func(c *Config) { c.Streams = l } }

// openTail opens a live tail with c and returns it streaming; it is closed when the test ends.
func (f *fixture) openTail(c *http.Client) *http.Response {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/tail/events", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		f.t.Fatalf("a live tail was refused: %v %v", err, resp)
	}
	f.t.Cleanup(func() { cancel(); resp.Body.Close() })
	return resp
}

// refusedStream asserts that a live tail or export with c is refused with 429 and Retry-After,
// saying want.
func (f *fixture) refusedStream(c *http.Client, path, want string) {
	f.t.Helper()
	// Bounded: a stream let through would never end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, want) {
		f.t.Fatalf("GET %s: %d (Retry-After %q); want 429 saying %q:\n%s", path, resp.StatusCode, resp.Header.Get("Retry-After"), want, body)
	}
}

// tailEnds asserts that the tail says its session ended, and then ends.
func (f *fixture) tailEnds(resp *http.Response) {
	f.t.Helper()
	sc := bufio.NewScanner(resp.Body)
	ended := false
	for sc.Scan() {
		ended = ended || sc.Text() == "event: ended"
	}
	if !ended {
		f.t.Fatalf("the live tail stopped (%v) without saying its session ended", sc.Err())
	}
	if sc.Err() != nil {
		f.t.Fatalf("the live tail said its session ended but did not end: %v", sc.Err())
	}
}

// One identity cannot hold every live tail and export of the node, however many times it signs
// in or whichever of its tenant's keys it uses.
func TestStreamsBoundedPerIdentity(t *testing.T) {
	f := newFixture(t, withStreams(slots.Limits{Max: 6, PerIdentity: 2, Reserved: 2}))
	a1, a2, a3 := f.browser(), f.browser(), f.browser()
	f.signIn(a1, keyAcme)
	f.signIn(a2, keyAcme)
	f.signIn(a3, keyAcme2)
	f.openTail(a1)
	f.openTail(a2)
	for _, c := range []*http.Client{a1, a2, a3} {
		f.refusedStream(c, "/tail/events", "tenant:acme already holds 2 live tails and exports on this node")
		f.refusedStream(c, "/export?format=json", "review.streams.per_identity")
	}
	// Another tenant, and a reviewer, still follow.
	g, rev := f.browser(), f.browser()
	f.signIn(g, keyGlobex)
	f.signIn(rev, keyAll)
	f.openTail(g)
	f.openTail(rev)
	if n := f.page.streams.Held("tenant:acme"); n != 2 {
		t.Errorf("acme holds %d slots after its refusals; want 2", n)
	}
}

// Tenants' sessions together cannot take the live tails kept for reviewer keys: past their share
// they are refused, saying so, and reviewers still follow until the node's bound.
func TestStreamsKeptForReviewers(t *testing.T) {
	f := newFixture(t, withStreams(slots.Limits{Max: 5, PerIdentity: 2, Reserved: 2}))
	acme, globex, secops, acmeSec := f.browser(), f.browser(), f.browser(), f.browser()
	f.signIn(acme, keyAcme)
	f.signIn(globex, keyGlobex)
	f.signIn(secops, keyAll)
	f.signIn(acmeSec, keyOneTeam)
	f.openTail(acme)
	f.openTail(acme)
	f.openTail(globex)
	f.refusedStream(globex, "/tail/events", "are kept for reviewer keys (review.streams.reviewers)")
	f.refusedStream(globex, "/export?format=csv", "are kept for reviewer keys")
	f.openTail(secops)
	f.openTail(secops)
	f.refusedStream(acmeSec, "/tail/events", "the most it serves at once (review.streams.max)")
}

// No stream outlives the session that opened it: signing out, expiring, or the node dropping the
// session ends its live tail at once, saying so, and gives its slot back.
func TestStreamsEndWithTheirSession(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(f *fixture, c *http.Client, csrf string)
	}{
		{"signed out", func(f *fixture, c *http.Client, csrf string) {
			if resp, _ := f.post(c, "/signout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
				f.t.Fatalf("sign-out: %d", resp.StatusCode)
			}
		}},
		{"expired", func(f *fixture, c *http.Client, csrf string) {
			f.ahead.Store(int64(9 * time.Hour)) // past the 8-hour session, by the page's clock
		}},
		{"dropped for newer sessions", func(f *fixture, c *http.Client, csrf string) {
			f.page.sessions.mu.Lock()
			f.page.sessions.max = 3
			f.page.sessions.mu.Unlock()
			for range 3 {
				f.signIn(f.browser(), keyAcme)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			c := f.browser()
			csrf := f.signIn(c, keyAcme)
			tail := f.openTail(c)
			if n := f.page.streams.Held("tenant:acme"); n != 1 {
				t.Fatalf("acme holds %d slots with a tail open", n)
			}
			tc.end(f, c, csrf)
			f.tailEnds(tail)
			wait.For(t, 10*time.Second, "the ended tail to give its slot back", func() bool { return f.page.streams.Held("tenant:acme") == 0 })
		})
	}
}

// Signing in again and again ends only the signing identity's own sessions: when the node holds
// as many as it keeps, the identity holding the most loses one, so a tenant cannot push a
// reviewer's session out.
func TestSignInsEndOnlyTheirOwnSessions(t *testing.T) {
	f := newFixture(t)
	f.page.sessions.mu.Lock()
	f.page.sessions.max = 4
	f.page.sessions.mu.Unlock()
	rev := f.browser()
	f.signIn(rev, keyAll)
	var tenant []*http.Client
	for range 6 {
		c := f.browser()
		f.signIn(c, keyAcme)
		tenant = append(tenant, c)
	}
	if resp, _ := f.get(rev, "/"); resp.StatusCode != http.StatusOK {
		t.Errorf("the reviewer's session after a tenant signed in 6 times: %d; want it still open", resp.StatusCode)
	}
	if resp, _ := f.get(tenant[0], "/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the tenant's first session: %d; want it ended (sent to sign in)", resp.StatusCode)
	}
	if resp, _ := f.get(tenant[5], "/"); resp.StatusCode != http.StatusOK {
		t.Errorf("the tenant's last session: %d", resp.StatusCode)
	}
}
