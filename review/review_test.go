package review

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export"
	"github.com/airlock-dev/airlock/internal/wait"
)

const (
	keyAcme    = "acme-api-key"
	keyAcme2   = "acme-second-api-key"
	keyGlobex  = "globex-api-key"
	keyAll     = "reviewer-all-key"
	keyOneTeam = "reviewer-acme-key"
)

// hostile is what a sandbox can put in a host name and a path: markup and script.
const (
	hostileHost = `<script>alert("host")</script>.example`
	hostilePath = `/"><img src=x onerror=alert('path')><svg onload=alert(1)>`
)

type fixture struct {
	t     *testing.T
	sink  *audit.FileSink
	page  *Server
	srv   *httptest.Server
	url   string // where the page is served: srv's, or serveBounded's
	start time.Time
	// ahead is how far the page's clock runs ahead of the wall clock (the test moves it).
	ahead atomic.Int64
}

// newFixture serves the page over a trail holding two leases, l-acme and l-globex, each with a
// lookup, an allowed request and two denials; opts change the page's configuration.
func newFixture(t *testing.T, opts ...func(*Config)) *fixture {
	t.Helper()
	sink, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1", SegmentBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	f := &fixture{t: t, sink: sink, start: time.Now()}
	cfg := Config{Trail: sink, Sink: sink, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys: map[string]string{tokenHash(keyAcme): "acme", tokenHash(keyAcme2): "acme", tokenHash(keyGlobex): "globex"},
		Reviewers: map[string]Reviewer{tokenHash(keyAll): {Name: "secops", Tenants: []string{AllTenants}},
			tokenHash(keyOneTeam): {Name: "acme-sec", Tenants: []string{"acme"}}},
		Verify: func(ctx context.Context, lease string) (*audit.Report, error) {
			return &audit.Report{Segments: 1, SegmentsValid: 1, LeaseRecords: 3}, nil
		},
		Now: func() time.Time { return time.Now().Add(time.Duration(f.ahead.Load())) }}
	for _, o := range opts {
		o(&cfg)
	}
	if f.page, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(f.page)
	t.Cleanup(f.srv.Close)
	f.url = f.srv.URL
	w := func(r audit.Record) {
		r.Time = time.Now()
		if err := sink.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []struct{ id, tenant string }{{"l-acme", "acme"}, {"l-globex", "globex"}} {
		w(audit.Record{Kind: audit.KindLease, Event: "bind", Lease: l.id, Tenant: l.tenant, Task: "task-" + l.tenant, Template: "default", Runtime: "runc"})
		w(audit.Record{Kind: audit.KindDNS, Decision: audit.Allow, Rule: "scope", Lease: l.id, Tenant: l.tenant, QName: "api.example.", QType: "A", Answers: 1})
		w(audit.Record{Kind: audit.KindHTTP, Decision: audit.Allow, Rule: "scope", Reason: "scope api.example", Lease: l.id, Tenant: l.tenant,
			Method: "GET", Host: "api.example", Port: 443, Path: "/v1/" + l.tenant, Status: 200, Credential: "demo", BytesUp: 100, BytesDown: 2000})
		w(audit.Record{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "task has no scope allowing POST evil.example:8443/upload",
			Lease: l.id, Tenant: l.tenant, Method: "POST", Host: "evil.example", Port: 8443, Path: "/upload", Status: 403})
		w(audit.Record{Kind: audit.KindHTTP, Decision: audit.Deny, Rule: "scope-miss", Reason: "task has no scope allowing POST " + hostileHost + hostilePath,
			Lease: l.id, Tenant: l.tenant, Method: "POST", Host: hostileHost, Port: 8443, Path: hostilePath, Status: 403})
	}
	sink.Flush(context.Background())
	return f
}

// browser is a client with a cookie jar that does not follow redirects.
func (f *fixture) browser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (f *fixture) get(c *http.Client, path string) (*http.Response, string) {
	f.t.Helper()
	resp, err := c.Get(f.url + path)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (f *fixture) post(c *http.Client, path string, form url.Values) (*http.Response, string) {
	f.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.url)
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// signIn signs c in with key and returns the session's CSRF token.
func (f *fixture) signIn(c *http.Client, key string) string {
	f.t.Helper()
	_, page := f.get(c, "/signin")
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		f.t.Fatalf("the sign-in page has no CSRF field: %s", page)
	}
	resp, body := f.post(c, "/signin", url.Values{"csrf": {m[1]}, "key": {key}, "next": {"/"}})
	if resp.StatusCode != http.StatusSeeOther {
		f.t.Fatalf("sign-in with a good key: %d %s", resp.StatusCode, body)
	}
	_, page = f.get(c, "/")
	if m = csrfField.FindStringSubmatch(page); m == nil {
		f.t.Fatalf("the overview has no CSRF field: %s", page)
	}
	return m[1]
}

func TestHeadersAndSignIn(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	resp, _ := f.get(c, "/leases/l-acme?since=1h")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/signin?next=%2Fleases%2Fl-acme%3Fsince%3D1h" {
		t.Fatalf("a page without a session: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != csp || !strings.Contains(got, "script-src 'self'") ||
		strings.Contains(got, "unsafe") {
		t.Errorf("CSP %q", got)
	}
	for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	_, page := f.get(c, "/signin")
	tok := csrfField.FindStringSubmatch(page)[1]
	// A form posted without the sign-in page's token, or from another origin, is refused.
	if resp, _ := f.post(c, "/signin", url.Values{"csrf": {"forged"}, "key": {keyAcme}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in with a forged CSRF token: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, f.url+"/signin", strings.NewReader(url.Values{"csrf": {tok}, "key": {keyAcme}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, _ := c.Do(req); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-in posted from another origin: %d", resp.StatusCode)
	}
	if resp, body := f.post(c, "/signin", url.Values{"csrf": {tok}, "key": {"not-a-key"}}); resp.StatusCode != http.StatusUnauthorized ||
		!strings.Contains(body, "neither a reviewer key nor an API key") {
		t.Errorf("sign-in with an unknown key: %d", resp.StatusCode)
	}
	_, page = f.get(c, "/signin")
	tok = csrfField.FindStringSubmatch(page)[1]
	resp, _ = f.post(c, "/signin", url.Values{"csrf": {tok}, "key": {keyAcme}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("a next of another origin: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "airlock-review" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" {
		t.Fatalf("session cookie %+v", session)
	}
	// Signed in: the page answers; signed out: the same cookie opens nothing.
	if resp, _ := f.get(c, "/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("overview after sign-in: %d", resp.StatusCode)
	}
	_, page = f.get(c, "/")
	csrf := csrfField.FindStringSubmatch(page)[1]
	if resp, _ := f.post(c, "/signout", url.Values{"csrf": {"x"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out without the session's token: %d", resp.StatusCode)
	}
	if resp, _ := f.post(c, "/signout", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("sign-out: %d", resp.StatusCode)
	}
	old := f.browser()
	old.Jar.SetCookies(mustURL(f.url), []*http.Cookie{{Name: "airlock-review", Value: session.Value}})
	if resp, _ := f.get(old, "/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a signed-out session's cookie still opens the page: %d", resp.StatusCode)
	}
}

func mustURL(s string) *url.URL {
	u, _ := url.Parse(s)
	return u
}

// A tenant's session reads its own leases only: another tenant's lease by URL, by filter, by
// export and by mark is answered as if it did not exist.
func TestTenantIsolation(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	csrf := f.signIn(c, keyAcme)
	_, page := f.get(c, "/")
	if !strings.Contains(page, "l-acme") || strings.Contains(page, "l-globex") {
		t.Errorf("acme's overview lists: acme %v, globex %v", strings.Contains(page, "l-acme"), strings.Contains(page, "l-globex"))
	}
	if resp, body := f.get(c, "/leases/l-globex"); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "task-globex") {
		t.Errorf("acme reading globex's lease by URL: %d", resp.StatusCode)
	}
	if resp, _ := f.get(c, "/leases/l-nonexistent"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a lease that does not exist: %d", resp.StatusCode)
	}
	if resp, _ := f.get(c, "/?tenant=globex"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("acme asking for tenant globex: %d", resp.StatusCode)
	}
	for _, p := range []string{"/export?format=json&lease=l-globex", "/export?format=json", "/destinations?host=api.example", "/denials"} {
		_, body := f.get(c, p)
		if strings.Contains(body, "l-globex") || strings.Contains(body, "globex") {
			t.Errorf("%s shows globex's records to acme", p)
		}
	}
	if resp, body := f.post(c, "/marks", url.Values{"csrf": {csrf}, "lease": {"l-globex"}, "tenant": {"globex"}}); resp.StatusCode != http.StatusForbidden ||
		strings.Contains(body, "task-globex") {
		t.Errorf("acme marking globex's lease naming globex: %d", resp.StatusCode)
	}
	// A reviewer of acme alone cannot read globex either; one of every tenant reads both.
	one := f.browser()
	f.signIn(one, keyOneTeam)
	if resp, _ := f.get(one, "/leases/l-globex"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("acme's reviewer reading globex's lease: %d", resp.StatusCode)
	}
	all := f.browser()
	f.signIn(all, keyAll)
	if _, page := f.get(all, "/"); !strings.Contains(page, "l-acme") || !strings.Contains(page, "l-globex") {
		t.Errorf("a reviewer of every tenant does not see both leases")
	}
	if resp, _ := f.get(all, "/leases/l-globex"); resp.StatusCode != http.StatusOK {
		t.Errorf("a reviewer of every tenant reading globex's lease: %d", resp.StatusCode)
	}
}

// Markup a sandbox put in a host and a path is shown as text on every view.
func TestRecordedValuesAreText(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	f.signIn(c, keyAll)
	for _, p := range []string{"/", "/leases/l-acme", "/destinations", "/denials", "/leases/l-acme?host=" + url.QueryEscape(hostileHost)} {
		resp, body := f.get(c, p)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, body)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", `"><img`} {
			if strings.Contains(body, raw) {
				t.Errorf("%s holds %q as markup", p, raw)
			}
		}
	}
	_, body := f.get(c, "/denials")
	if !strings.Contains(body, "&lt;script&gt;alert(&#34;host&#34;)&lt;/script&gt;.example") {
		t.Errorf("the hostile host is not shown as escaped text on the denials view")
	}
	if !strings.Contains(body, "would be allowed by") && !strings.Contains(body, "narrowest scope") {
		t.Errorf("a scope-miss denial does not say what would allow it")
	}
}

// The ledger explains each row: a denial with its rule and the scope that would have allowed it,
// a connection tied to the lookup before it.
func TestLedgerExplainsRows(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	f.signIn(c, keyAcme)
	_, body := f.get(c, "/leases/l-acme")
	for _, want := range []string{
		"scope-miss", "the narrowest scope that would have allowed it", `&#34;ports&#34;:[8443]`, `&#34;methods&#34;:[&#34;POST&#34;]`,
		"after the lookup at seq", "followed by a connection at seq", "credential <code>demo</code>", "template <b>default</b>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the ledger lacks %q", want)
		}
	}
	_, body = f.get(c, "/leases/l-acme?verify=1")
	if !strings.Contains(body, `id="verify-result">intact`) {
		t.Errorf("the ledger's verification is not shown")
	}
	// Filters narrow the ledger on the server.
	_, body = f.get(c, "/leases/l-acme?decision=deny")
	if strings.Contains(body, "/v1/acme") || !strings.Contains(body, "scope-miss") {
		t.Errorf("decision=deny shows an allowed request, or no denial")
	}
}

// A mark needs the session's CSRF token, records which reviewer key marked what, and shows on
// the overview.
func TestMarks(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	csrf := f.signIn(c, keyAll)
	if resp, _ := f.post(c, "/marks", url.Values{"lease": {"l-acme"}, "note": {"x"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a mark without the CSRF token: %d", resp.StatusCode)
	}
	resp, body := f.post(c, "/marks", url.Values{"csrf": {csrf}, "lease": {"l-acme"}, "note": {"looked at the <b>denial</b>"}, "back": {"/?since=1h"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/?since=1h" {
		t.Fatalf("mark: %d %s", resp.StatusCode, body)
	}
	if resp, _ := f.post(c, "/marks", url.Values{"csrf": {csrf}, "host": {"API.example."}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("host mark: %d", resp.StatusCode)
	}
	var marks []audit.Record
	f.sink.Query(context.Background(), audit.Query{Event: EventReviewMark}, func(r audit.Record) error { marks = append(marks, r); return nil })
	if len(marks) != 2 || marks[0].Reviewer != "reviewer:secops" || marks[0].Lease != "l-acme" || marks[0].Tenant != "acme" ||
		marks[0].Reason != "looked at the <b>denial</b>" || marks[1].Host != "api.example" {
		t.Fatalf("mark records: %+v", marks)
	}
	_, page := f.get(c, "/")
	if !strings.Contains(page, "✓ secops") || !strings.Contains(page, "looked at the &lt;b&gt;denial&lt;/b&gt;") {
		t.Errorf("the overview does not show the mark")
	}
	if _, page := f.get(c, "/destinations"); !strings.Contains(page, "✓ secops") {
		t.Errorf("the destinations view does not show the host's mark")
	}
	// A session cannot fill the trail with marks.
	limited := false
	for range 20 {
		resp, _ := f.post(c, "/marks", url.Values{"csrf": {csrf}, "host": {"api.example"}})
		limited = limited || resp.StatusCode == http.StatusTooManyRequests
	}
	if !limited {
		t.Errorf("20 marks in a row from one session were all taken")
	}
}

// Export writes exactly the records the filters select, as airlock logs --format writes them.
func TestExportIsTheFilteredView(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	f.signIn(c, keyAll)
	for _, format := range []string{"json", "csv", "ocsf"} {
		resp, body := f.get(c, "/export?since=&format="+format+"&lease=l-acme&decision=deny")
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Disposition"), "attachment") {
			t.Fatalf("export %s: %d", format, resp.StatusCode)
		}
		var want bytes.Buffer
		w, _ := export.NewWriter(&want, format)
		f.sink.Query(context.Background(), audit.Query{Lease: "l-acme", Decision: "deny"}, func(r audit.Record) error { return w.Write(r) })
		w.Flush()
		if body != want.String() || want.Len() == 0 {
			t.Errorf("export %s:\n%s\nwant:\n%s", format, body, want.String())
		}
		if resp.Trailer.Get("X-Airlock-Audit-Problems") != "0" {
			t.Errorf("export %s: problems trailer %q", format, resp.Trailer.Get("X-Airlock-Audit-Problems"))
		}
	}
	if resp, _ := f.get(c, "/export?format=xml"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("export of an unknown format: %d", resp.StatusCode)
	}
}

// The live tail streams the records written after it began that meet its filters, and resumes
// after the last one it sent.
func TestTailFollows(t *testing.T) {
	f := newFixture(t)
	c := f.browser()
	f.signIn(c, keyAcme)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+"/tail/events?lease=l-acme", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("tail: %v %v", err, resp)
	}
	defer resp.Body.Close()
	for _, r := range []audit.Record{
		{Kind: audit.KindHTTP, Lease: "l-globex", Tenant: "globex", Host: "other.example", Decision: audit.Allow},
		{Kind: audit.KindHTTP, Lease: "l-acme", Tenant: "acme", Method: "GET", Host: "new.example", Port: 443, Path: "/<b>", Decision: audit.Allow},
	} {
		r.Time = time.Now()
		f.sink.Write(context.Background(), r)
	}
	sc := bufio.NewScanner(resp.Body)
	var got tailEvent
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if got.Lease != "l-acme" || !strings.Contains(got.What, "new.example:443/<b>") {
		t.Fatalf("the tail's first event: %+v (%v); want the new acme request", got, sc.Err())
	}
}

// A redirect after sign-in stays on the page, whatever a link put in next.
func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/leases/l-1?since=1h": "/leases/l-1?since=1h", "//evil.example/": "/", "/\\evil.example": "/", "/\t/evil.example": "/",
		"/\n/evil.example": "/", "https://evil.example/": "/", "javascript:alert(1)": "/", "": "/", "/%2F%2Fevil.example": "/%2F%2Fevil.example",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// Under TLS the session cookie is Secure and __Host- prefixed, and the page asks for HSTS.
func TestSecureCookie(t *testing.T) {
	sink, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	s, _ := New(Config{Trail: sink, Sink: sink, Secure: true, Keys: map[string]string{tokenHash(keyAcme): "acme"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewTLSServer(s)
	defer srv.Close()
	c := srv.Client()
	c.Jar, _ = cookiejar.New(nil)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	f := &fixture{t: t, srv: srv, url: srv.URL}
	_, page := f.get(c, "/signin")
	resp, _ := f.post(c, "/signin", url.Values{"csrf": {csrfField.FindStringSubmatch(page)[1]}, "key": {keyAcme}})
	var ck *http.Cookie
	for _, x := range resp.Cookies() {
		if x.Name == "__Host-airlock-review" {
			ck = x
		}
	}
	if ck == nil || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Domain != "" {
		t.Fatalf("session cookie under TLS: %+v", ck)
	}
	if resp.Header.Get("Strict-Transport-Security") == "" {
		t.Error("no HSTS under TLS")
	}
}

// The Approvals view lists the held requests a session may answer and answers them in its name;
// the key that leased cannot approve its own request, another tenant sees nothing.
func TestApprovalsView(t *testing.T) {
	sink, err := audit.OpenFile(audit.FileConfig{Dir: t.TempDir(), Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	reg := approval.New(approval.Config{Hold: 20 * time.Second, Audit: sink,
		LeaseKey: func(context.Context, string, string) (string, error) { return tokenHash(keyAcme), nil }})
	s, _ := New(Config{Trail: sink, Sink: sink, Approvals: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Keys:      map[string]string{tokenHash(keyAcme): "acme", tokenHash(keyGlobex): "globex"},
		Reviewers: map[string]Reviewer{tokenHash(keyAll): {Name: "secops", Tenants: []string{AllTenants}}}})
	srv := httptest.NewServer(s)
	defer srv.Close()
	f := &fixture{t: t, srv: srv, url: srv.URL}
	outcome := make(chan approval.Outcome, 1)
	go func() {
		outcome <- reg.Wait(context.Background(), approval.Request{Lease: "l-acme", Tenant: "acme", Method: "POST", Host: "deploy.example",
			Port: 443, Path: "/<b>deploy</b>"})
	}()
	var id string
	wait.Until(10*time.Second, "the approval to be pending", func() bool {
		aps := reg.List(func(string) bool { return true })
		if len(aps) == 1 {
			id = aps[0].ID
		}
		return id != ""
	})
	globex := f.browser()
	f.signIn(globex, keyGlobex)
	if _, page := f.get(globex, "/approvals"); strings.Contains(page, id) {
		t.Error("another tenant sees the approval")
	}
	acme := f.browser()
	acmeCSRF := f.signIn(acme, keyAcme)
	if _, page := f.get(acme, "/approvals"); !strings.Contains(page, id) || !strings.Contains(page, "/&lt;b&gt;deploy&lt;/b&gt;") {
		t.Error("the tenant does not see its approval, or its path as text")
	}
	if resp, body := f.post(acme, "/approvals/"+id, url.Values{"csrf": {acmeCSRF}, "decision": {"approve-once"}}); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(body, "cannot approve its own request") {
		t.Errorf("the leasing key approving: %d", resp.StatusCode)
	}
	rev := f.browser()
	csrf := f.signIn(rev, keyAll)
	if resp, _ := f.post(rev, "/approvals/"+id, url.Values{"decision": {"approve-once"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("an answer without the CSRF token: %d", resp.StatusCode)
	}
	if resp, _ := f.post(rev, "/approvals/"+id, url.Values{"csrf": {csrf}, "decision": {"approve-once"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the reviewer's approval: %d", resp.StatusCode)
	}
	select {
	case o := <-outcome:
		if !o.Approved || o.Reviewer != "secops" {
			t.Fatalf("outcome %+v", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not let through within 10s")
	}
}
