package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/scope"
)

// browserEvents records what a page did that a test must see: dialogs (an injected alert),
// uncaught exceptions, console errors and the browser's own error entries (a CSP refusal).
type browserEvents struct {
	mu       sync.Mutex
	dialogs  []string
	problems []string
}

func (b *browserEvents) add(list *[]string, s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*list = append(*list, s)
}

func (b *browserEvents) seen() ([]string, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...), append([]string(nil), b.problems...)
}

// startBrowser starts Debian's headless Chromium (scripts/deps.sh installs it) driven over the
// DevTools protocol, recording every dialog (and dismissing it), exception and console error.
func startBrowser(t *testing.T) (context.Context, *browserEvents) {
	t.Helper()
	path := "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("chromium is missing (scripts/deps.sh installs Debian's chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1500, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	ev := &browserEvents{}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for d, err := range dialogs {
			if err != nil {
				return
			}
			ev.add(&ev.dialogs, d.Message)
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			// A document answered 404 on purpose (another tenant's lease) is the browser's
			// network log, not the page's doing.
			if m.IsException() || m.Type == chromedp.ConsoleError && m.Source != "network" {
				ev.add(&ev.problems, m.String())
			}
		}
	}()
	return ctx, ev
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// The review page, in a real browser against a real node with real leases: sign in, filter to
// one lease, open its ledger, see a denial explained, follow the live tail as a request happens,
// export the filtered view and compare it with airlock logs, mark the lease reviewed, sign out.
// Markup a sandbox put in a DNS name, a path and a Host header is shown as inert text, and a
// tenant's session cannot read another tenant's lease by URL.
func TestReviewPageInBrowser(t *testing.T) {
	dir := t.TempDir()
	reviewPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	const reviewerKey, globexKey = "e2e-reviewer-key-0123456789", "e2e-globex-key-0123456789"
	spec := nodeSpec{Name: "e2ereview", Network: "airlock-e2ereview", Bridge: "airlock-e2er", Subnet: "10.222.0.0/24", MinWarm: 1,
		API: fmt.Sprintf("  keys: [{tenant: globex, sha256: %s}]\n", sha256Hex(globexKey)),
		Extra: fmt.Sprintf(`audit:
  checkpoint_every: 1s
review:
  listen: 127.0.0.1:%d
  reviewers:
    - {name: secops, sha256: %s, tenants: ["*"]}
`, reviewPort, sha256Hex(reviewerKey))}
	cfgPath, err := spec.write(dir, startUpstream(t))
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, spec, dir+"/state", cfgPath)
	base := n.client.Ready.Review
	if base != fmt.Sprintf("http://127.0.0.1:%d", reviewPort) || strings.Contains(n.client.Addr, fmt.Sprint(reviewPort)) {
		t.Fatalf("the review page is at %q (API %s); want its own listener on port %d", base, n.client.Addr, reviewPort)
	}

	a := n.lease(t, "api.example.test=demo")
	other := n.lease(t, "api.example.test")
	if out, errs, c := n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami"); c != 0 {
		t.Fatalf("allowed request: %s %s", out, errs)
	}
	n.exec(t, a.ID, "curl", "-sS", "http://evil.example/")
	// What a sandbox controls that reaches the page: a DNS name, a path, a Host header.
	n.exec(t, a.ID, "dig", "+short", "+tries=1", "+time=2", `<svg/onload=alert(1)>.evil.example`)
	n.exec(t, a.ID, "curl", "-sS", "--path-as-is", `http://evil.example/"><img/src/onerror=alert(2)><script>alert(3)</script>`)
	// A host no client library would send: written to the gateway by hand, as a CONNECT
	// authority and as an HTTP/1.0 absolute URL.
	rawOut, rawErr, _ := n.exec(t, a.ID, "bash", "-c", `gw=${HTTPS_PROXY#http://}; gw=${gw%%/*}; echo "gateway $gw"
for req in 'CONNECT <script>alert(4)</script>:443 HTTP/1.1\r\n\r\n' 'GET http://<script>alert(5)</script>.example/ HTTP/1.0\r\n\r\n' \
  'GET http://evil.example/"><img/src/onerror=alert(6)> HTTP/1.1\r\nHost: evil.example\r\n\r\n'; do
  exec 3<>/dev/tcp/${gw%:*}/${gw##*:}; printf "$req" >&3; timeout 5 head -c 120 <&3; echo; exec 3<&-
done`)
	if !strings.Contains(rawOut, "400 Bad Request") {
		t.Fatalf("the hand-written requests did not reach the gateway: %s %s", rawOut, rawErr)
	}
	hostile := map[string]bool{}
	var seen []string
	// The records land a moment after the commands end: wait (bounded) for all three.
	n.trailUntil(t, a.ID, func(rs []audit.Record) bool {
		seen = seen[:0]
		clear(hostile)
		for _, r := range rs {
			if r.Kind != audit.KindHTTP && r.Kind != audit.KindDNS {
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s %s %s %s: %s", r.Kind, r.Rule, r.QName, r.Host, r.Path, r.Reason))
			// The gateway keeps a path as sent, percent-encoded; a host it cannot use is
			// refused and named in the reason; the resolver keeps the name asked.
			hostile["name"] = hostile["name"] || strings.Contains(r.QName, "<svg")
			hostile["path"] = hostile["path"] || strings.Contains(r.Path, "onerror=alert")
			hostile["host in a reason"] = hostile["host in a reason"] || strings.Contains(r.Reason, "<script>")
		}
		return hostile["name"] && hostile["path"] && hostile["host in a reason"]
	})
	if len(hostile) != 3 || !hostile["name"] || !hostile["path"] || !hostile["host in a reason"] {
		t.Fatalf("the trail lacks the sandbox's markup in a name, a path or a refused host (%v); the attack needs them there:\n%s",
			hostile, strings.Join(seen, "\n"))
	}
	n.exec(t, other.ID, "curl", "-sS", "https://api.example.test/whoami")

	ctx, events := startBrowser(t)
	shots := os.Getenv("AIRLOCK_SCREENSHOTS") // the docs' screenshots are refreshed from here
	if shots == "" {
		shots = dir
	}
	// Each step is bounded: a page that never shows what is waited for fails the step.
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 30*time.Second) }
	fatal := func(what string, err error) {
		t.Helper()
		c, cancel := step()
		defer cancel()
		body, _ := chromedp.Run(c, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("%s: %v\npage: %s", what, err, body)
	}
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := step()
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			fatal(what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		c, cancel := step()
		defer cancel()
		s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			fatal("read "+sel, err)
		}
		return s
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			fatal("read the location", err)
		}
		return u
	}
	fetch := func(url string) string {
		t.Helper()
		c, cancel := step()
		defer cancel()
		got, err := chromedp.Run(c, chromedp.Evaluate[string](fmt.Sprintf(`fetch(%q).then(r => r.text())`, url), chromedp.EvalAwaitPromise))
		if err != nil {
			fatal("fetch "+url, err)
		}
		return got
	}
	noInjectedMarkup := func(where string) {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('svg, img, iframe, object, embed, script:not([src])').length`))
		if err != nil || n != 0 {
			t.Errorf("%s: %d elements a sandbox's markup made (%v)", where, n, err)
		}
	}
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			fatal("screenshot", err)
		}
		writeShot(t, filepath.Join(shots, name), png)
	}
	// arrive waits until a click's navigation reached a URL holding part.
	arrive := func(part string) {
		t.Helper()
		if err := waitUntil(30*time.Second, "the browser to open a URL with "+part, func() bool {
			u, err := chromedp.Run(ctx, chromedp.Location()) // fails while the page navigates
			return err == nil && strings.Contains(u, part)
		}); err != nil {
			t.Fatal(err)
		}
	}
	rendered := map[string]string{}

	// Sign in: the page sends a browser without a session to the sign-in form and back.
	do("sign in", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.SendKeys(chromedp.ID("key"), reviewerKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("leases")))
	if got := text("#leases"); !strings.Contains(got, a.ID) || !strings.Contains(got, other.ID) {
		t.Fatalf("the overview does not list both leases: %s", got)
	}
	rendered["overview"] = text("footer")
	noInjectedMarkup("the overview")
	screenshot("review-overview.png")

	// Filter to one lease and to its requests: the filters live in the URL.
	do("filter", chromedp.SetValue(chromedp.CSS(`input[name="lease"]`), a.ID), chromedp.SetValue(chromedp.CSS(`select[name="kind"]`), "http"),
		chromedp.Click(chromedp.ID("apply")))
	arrive("lease=" + a.ID)
	do("the filtered overview", chromedp.WaitVisible(chromedp.ID("leases")))
	if url, got := location(), text("#leases"); !strings.Contains(url, "lease="+a.ID) || !strings.Contains(url, "kind=http") ||
		strings.Contains(got, other.ID) || !strings.Contains(got, a.ID) {
		t.Fatalf("filtered to lease %s and kind http: %s lists %s", a.ID, url, got)
	}

	// The lease's ledger: a denial, its rule and what would have allowed it.
	do("open the ledger", chromedp.Click(chromedp.CSS("a.lease-link")))
	arrive("/leases/" + a.ID)
	do("the ledger", chromedp.WaitVisible(chromedp.ID("ledger")))
	ledger := text("#ledger")
	for _, want := range []string{"scope-miss", "would be allowed by: the narrowest scope that would have allowed it", `"host":"evil.example"`,
		"api.example.test:443/whoami", "credential demo", `/%22%3E%3Cimg/src/onerror=alert%282%29`, `bad host "<script>alert(5)<`} {
		if !strings.Contains(ledger, want) {
			t.Errorf("the ledger lacks %q:\n%s", want, ledger)
		}
	}
	rendered["ledger"] = text("footer")
	noInjectedMarkup("the ledger")
	do("verify the lease's chain", chromedp.Click(chromedp.ID("verify")), chromedp.WaitVisible(chromedp.ID("verify-result")))
	if got := text("#verify-result"); got != "intact" {
		t.Errorf("the lease's chain verified as %q", got)
	}
	for _, view := range []string{"/denials?since=1h", "/destinations?since=1h", "/?since=1h&host=evil.example", "/leases/" + a.ID + "?since="} {
		do("open "+view, chromedp.Navigate(base+view), chromedp.WaitVisible(chromedp.CSS("footer")))
		noInjectedMarkup(view)
	}
	screenshot("review-ledger.png") // the whole ledger, the last view opened
	do("denials", chromedp.Navigate(base+"/denials?since=1h&lease="+a.ID), chromedp.WaitVisible(chromedp.CSS("footer")))
	if got := text("main"); !strings.Contains(got, "scope-miss") || !strings.Contains(got, "<svg/onload=alert") {
		t.Errorf("the denials view lacks the scope-miss group or the DNS name as text:\n%s", got)
	}

	// The live tail follows a request made while it is open.
	do("open the tail", chromedp.Navigate(base+"/tail?lease="+a.ID), chromedp.WaitVisible(chromedp.ID("tail")))
	if err := waitUntil(30*time.Second, "the live tail to connect", func() bool { return strings.HasPrefix(text("#tail-status"), "Following") }); err != nil {
		t.Fatal(err)
	}
	n.exec(t, a.ID, "curl", "-sS", "https://api.example.test/whoami?tail=1")
	if err := waitUntil(30*time.Second, "the live tail to show the new request", func() bool {
		return strings.Contains(text("#tail"), "/whoami?tail=1")
	}); err != nil {
		t.Fatalf("%v: %s", err, text("#tail"))
	}

	// Export the filtered view: the same bytes airlock logs prints for the same filter (the lease
	// ended first, so nothing is added between the two).
	if _, errs, c := n.cli(t, "release", a.ID); c != 0 {
		t.Fatalf("release: %s", errs)
	}
	n.trailUntil(t, a.ID, func(rs []audit.Record) bool {
		for _, r := range rs {
			if r.Lease == a.ID && r.Event == "workspace" {
				return true
			}
		}
		return false
	})
	do("open the filtered ledger", chromedp.Navigate(base+"/leases/"+a.ID+"?since=&kind=http"), chromedp.WaitVisible(chromedp.ID("ledger")))
	for _, f := range []struct{ format, link string }{{"json", "export-json"}, {"csv", "export-csv"}, {"ocsf", "export-ocsf"}} {
		c, cancel := step()
		href, err := chromedp.Run(c, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).href`, f.link)))
		cancel()
		if err != nil {
			fatal("the export link", err)
		}
		got := fetch(href)
		want, errs, code := n.cli(t, "logs", "--lease", a.ID, "--kind", "http", "--format", f.format)
		if code != 0 || got != want || !strings.Contains(got, "evil.example") {
			t.Errorf("export as %s (%d bytes) differs from airlock logs --format %s (%d bytes, exit %d %s):\n%s\n---\n%s",
				f.format, len(got), f.format, len(want), code, errs, got, want)
		}
	}

	// What the lease did, as the narrowest token: the one allowed destination with its
	// credential, the refused ones with the scope that would have allowed them.
	out, errs, code := n.cli(t, "suggest", "--json", a.ID)
	var claim struct{ Scopes []scope.Scope }
	if code != 0 || json.Unmarshal([]byte(out), &claim) != nil || len(claim.Scopes) != 1 {
		t.Fatalf("airlock suggest --json: exit %d %s %s", code, out, errs)
	}
	if sc := claim.Scopes[0]; sc.Host != "api.example.test" || sc.Credential != "demo" || !slices.Equal(sc.Methods, []string{"GET"}) ||
		!slices.Equal(sc.Paths, []string{"/whoami"}) {
		t.Errorf("suggested scope %+v, want GET /whoami on api.example.test with demo", sc)
	}
	if _, err := scope.Parse(claim.Scopes); err != nil {
		t.Errorf("the suggested claim does not parse: %v", err)
	}
	suggested, _, _ := n.cli(t, "suggest", a.ID)
	if !strings.Contains(suggested, "GET evil.example:80/") || !strings.Contains(suggested, "Denied, and what would have allowed it") {
		t.Errorf("airlock suggest:\n%s", suggested)
	}
	t.Logf("airlock suggest %s:\n%s", a.ID, suggested)

	// Mark the lease reviewed: the mark shows, and is a record naming the reviewer key as one.
	do("mark reviewed", chromedp.Navigate(base+"/leases/"+a.ID+"?since="), chromedp.WaitVisible(chromedp.ID("ledger")),
		chromedp.SendKeys(chromedp.CSS(`form.mark input[name="note"]`), "denials looked at: an attack test"),
		chromedp.Click(chromedp.CSS(".mark-button")), chromedp.WaitVisible(chromedp.ID("reviewed")))
	if got := text("#reviewed"); !strings.Contains(got, "reviewed by secops") || !strings.Contains(got, "denials looked at") {
		t.Errorf("after marking: %q", got)
	}
	marked := false
	for _, r := range n.trail(t) {
		marked = marked || r.Event == "review-mark" && r.Lease == a.ID && r.Reviewer == "reviewer:secops" && r.Tenant == "dev"
	}
	if !marked {
		t.Errorf("the trail holds no review-mark record of lease %s by secops", a.ID)
	}

	// Sign out: the session is gone.
	do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("key")),
		chromedp.Navigate(base+"/leases/"+a.ID), chromedp.WaitVisible(chromedp.ID("key")))
	if url := location(); !strings.Contains(url, "/signin") {
		t.Errorf("after signing out, a ledger opened at %s", url)
	}

	// Another tenant's session cannot read the lease by its URL, nor export it.
	do("sign in as globex", chromedp.SendKeys(chromedp.ID("key"), globexKey), chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if got := text("main"); !strings.Contains(got, "404") || strings.Contains(got, a.Task) {
		t.Errorf("globex opening dev's lease by URL: %s", got)
	}
	do("globex's overview", chromedp.Navigate(base+"/?since="), chromedp.WaitVisible(chromedp.ID("leases")))
	if got, exported := text("#leases"), fetch("/export?since=&format=json&lease="+a.ID); strings.Contains(got, a.ID) || exported != "" {
		t.Errorf("globex's overview lists dev's lease (%v) or its export holds %d bytes", strings.Contains(got, a.ID), len(exported))
	}

	dialogs, problems := events.seen()
	if len(dialogs) > 0 || len(problems) > 0 {
		t.Errorf("the sandbox's markup ran or the page failed: dialogs %q, problems %q", dialogs, problems)
	}
	t.Logf("render times: overview %s; ledger %s", rendered["overview"], rendered["ledger"])
}

func writeShot(t *testing.T, path string, png []byte) {
	t.Helper()
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s is not a PNG (%d bytes)", path, len(png))
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
