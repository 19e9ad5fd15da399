package review

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// markRecords returns the trail's review-mark records.
func (f *fixture) markRecords() []audit.Record {
	f.t.Helper()
	if err := f.sink.Flush(context.Background()); err != nil {
		f.t.Fatal(err)
	}
	var out []audit.Record
	if _, err := f.sink.Query(context.Background(), audit.Query{Event: EventReviewMark}, func(r audit.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// write appends records to the trail as another writer would, now.
func (f *fixture) write(recs ...audit.Record) {
	f.t.Helper()
	for _, r := range recs {
		r.Time = time.Now()
		if err := f.sink.Write(context.Background(), r); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := f.sink.Flush(context.Background()); err != nil {
		f.t.Fatal(err)
	}
}

// markFormTag finds a form that marks.
var markFormTag = regexp.MustCompile(`<form method="post" action="/marks"`)

// Only reviewer keys mark, and only what they read: a tenant's key posting to the mark endpoint
// directly (the page shows it no form) is refused for not being a reviewer, whatever it names,
// and a reviewer of one tenant cannot mark another tenant's lease or a host for another tenant.
// No refused mark leaves a record.
func TestOnlyReviewersMark(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, key string
		form      url.Values
		status    int
		says      string
	}{
		{"a tenant's key marks its own lease", keyAcme, url.Values{"lease": {"l-acme"}, "note": {"looks fine to me"}},
			http.StatusForbidden, "only a reviewer key marks"},
		{"a tenant's key marks a host every tenant shares", keyAcme, url.Values{"host": {"api.example"}},
			http.StatusForbidden, "only a reviewer key marks"},
		{"a tenant's key marks a host for every tenant", keyAcme, url.Values{"host": {"evil.example"}, "tenant": {""}},
			http.StatusForbidden, "only a reviewer key marks"},
		{"a tenant's other key marks its tenant's lease", keyAcme2, url.Values{"lease": {"l-acme"}, "tenant": {"acme"}},
			http.StatusForbidden, "only a reviewer key marks"},
		{"a tenant's key marks another tenant's lease", keyAcme, url.Values{"lease": {"l-globex"}, "tenant": {"globex"}},
			http.StatusForbidden, "only a reviewer key marks"},
		{"a reviewer of acme marks globex's lease", keyOneTeam, url.Values{"lease": {"l-globex"}},
			http.StatusNotFound, errNoLease.Error()},
		{"a reviewer of acme marks globex's lease naming globex", keyOneTeam, url.Values{"lease": {"l-globex"}, "tenant": {"globex"}},
			http.StatusForbidden, `does not read tenant &#34;globex&#34;`},
		{"a reviewer of acme marks a host for globex", keyOneTeam, url.Values{"host": {"api.example"}, "tenant": {"globex"}},
			http.StatusForbidden, `does not read tenant &#34;globex&#34;`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.t = t
			c := f.browser()
			csrf := f.signIn(c, tc.key)
			before := len(f.markRecords())
			form := tc.form
			form.Set("csrf", csrf)
			resp, body := f.post(c, "/marks", form)
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.says) {
				t.Errorf("POST /marks %v: %d, want %d saying %q:\n%s", tc.form, resp.StatusCode, tc.status, tc.says, body)
			}
			if n := len(f.markRecords()); n != before {
				t.Errorf("a refused mark left %d record(s) in the trail", n-before)
			}
		})
	}
}

// A tenant sees a reviewer's mark of its own leases, read-only, and no form to make one.
func TestTenantsReadMarksOnly(t *testing.T) {
	f := newFixture(t)
	rev := f.browser()
	csrf := f.signIn(rev, keyAll)
	if resp, body := f.post(rev, "/marks", url.Values{"csrf": {csrf}, "lease": {"l-acme"}, "note": {"checked the denials"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the reviewer's mark: %d %s", resp.StatusCode, body)
	}
	acme := f.browser()
	f.signIn(acme, keyAcme)
	for _, p := range []string{"/", "/leases/l-acme", "/destinations"} {
		_, body := f.get(acme, p)
		if markFormTag.MatchString(body) {
			t.Errorf("%s shows a tenant's session a form to mark", p)
		}
	}
	if _, body := f.get(acme, "/leases/l-acme"); !strings.Contains(body, "✓ reviewed by secops") || !strings.Contains(body, "checked the denials") {
		t.Errorf("the tenant does not see the reviewer's mark of its lease")
	}
	if _, body := f.get(acme, "/destinations"); !strings.Contains(body, "not reviewed") {
		t.Errorf("the tenant's destinations do not say they are not reviewed")
	}
}

// The views take marks from reviewer keys only: marks a tenant's key made before only reviewers
// could, marks that do not say what kind of key made them (written before marks did), and records
// of other kinds or events that carry a reviewer's name all leave a lease or a host unreviewed,
// and none replaces a reviewer's mark.
func TestViewsTakeReviewerMarksOnly(t *testing.T) {
	f := newFixture(t)
	f.write(
		// Made by tenant sessions before this change.
		audit.Record{Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: "tenant:acme", Lease: "l-acme", Tenant: "acme", Task: "task-acme", Reason: "tenant says: fine"},
		audit.Record{Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: "tenant:acme", Host: "evil.example", Tenant: "acme", Reason: "tenant says: fine"},
		// Written before marks said what kind of key made them.
		audit.Record{Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: "secops", Lease: "l-globex", Tenant: "globex", Reason: "old mark"},
		audit.Record{Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: "secops", Host: "api.example", Reason: "old mark"},
		// Other records naming a reviewer: an approval step, and a request whose event and
		// reviewer say "mark" (no writer other than the page may make a mark count).
		audit.Record{Kind: audit.KindHTTP, Event: "approval-approve", Reviewer: "reviewer:secops", Lease: "l-globex", Tenant: "globex", Host: "api.example"},
		audit.Record{Kind: audit.KindHTTP, Event: EventReviewMark, Reviewer: "reviewer:secops", Lease: "l-globex", Tenant: "globex", Reason: "forged"},
		audit.Record{Kind: audit.KindHTTP, Event: EventReviewMark, Reviewer: "reviewer:secops", Host: "evil.example", Reason: "forged"},
	)
	rev := f.browser()
	f.signIn(rev, keyAll)
	for _, p := range []string{"/?since=", "/?since=&tenant=acme", "/leases/l-acme?since=", "/leases/l-globex?since=", "/destinations?since=", "/destinations?since=&tenant=acme"} {
		_, body := f.get(rev, p)
		for _, shown := range []string{"✓", "tenant says", "old mark", "forged"} {
			if strings.Contains(body, shown) && !strings.Contains(p, "/leases/") {
				t.Errorf("%s shows %q: a mark that is not a reviewer's counts", p, shown)
			}
		}
		if strings.Contains(body, `class="reviewed"`) {
			t.Errorf("%s shows something reviewed", p)
		}
		if !markFormTag.MatchString(body) {
			t.Errorf("%s shows the reviewer no form to mark", p)
		}
	}
	// The ledger still lists the old records (they are the trail), saying why they count for nothing.
	_, body := f.get(rev, "/leases/l-acme?since=")
	if !strings.Contains(body, "by tenant acme&#39;s API key: not a review") {
		t.Errorf("the ledger does not say the tenant's old mark is not a review:\n%s", body)
	}
	if _, body := f.get(rev, "/leases/l-globex?since="); !strings.Contains(body, "does not say it came from a reviewer key") {
		t.Errorf("the ledger does not say the unattributed old mark is not counted")
	}

	// A reviewer's mark counts, and a tenant's record written after it does not replace it.
	csrf := f.signIn(rev, keyAll)
	if resp, _ := f.post(rev, "/marks", url.Values{"csrf": {csrf}, "lease": {"l-acme"}, "note": {"reviewed for real"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the reviewer's mark: %d", resp.StatusCode)
	}
	f.write(audit.Record{Kind: audit.KindAudit, Event: EventReviewMark, Reviewer: "tenant:acme", Lease: "l-acme", Tenant: "acme", Reason: "tenant override"})
	_, body = f.get(rev, "/?since=")
	if !strings.Contains(body, "✓ secops") || !strings.Contains(body, "reviewed for real") || strings.Contains(body, "tenant override") {
		t.Errorf("the overview after a reviewer's mark and a later tenant's record: reviewer %v, tenant's note %v",
			strings.Contains(body, "✓ secops"), strings.Contains(body, "tenant override"))
	}
}

// Destinations are every tenant's, so a host's mark shows only in views of the tenant it was made
// for: a reviewer of acme marking api.example reviewed acme's traffic to it, not globex's nor
// every tenant's, and a reviewer of every tenant marking it across tenants speaks of traffic a
// reviewer of acme (or acme itself) may not read.
func TestHostMarksStayWithTheirTenant(t *testing.T) {
	f := newFixture(t)
	one := f.browser()
	csrf := f.signIn(one, keyOneTeam)
	if resp, body := f.post(one, "/marks", url.Values{"csrf": {csrf}, "host": {"api.example"}, "note": {"acme's calls are fine"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("acme's reviewer marking api.example: %d %s", resp.StatusCode, body)
	}
	all := f.browser()
	csrf = f.signIn(all, keyAll)
	if resp, _ := f.post(all, "/marks", url.Values{"csrf": {csrf}, "host": {"evil.example"}, "note": {"globex's lease l-globex also went here"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the all-tenant reviewer marking evil.example: %d", resp.StatusCode)
	}
	if rs := f.markRecords(); len(rs) != 2 || rs[0].Tenant != "acme" || rs[0].Reviewer != "reviewer:acme-sec" || rs[1].Tenant != "" {
		t.Fatalf("mark records %+v", rs)
	}
	acme, globex := f.browser(), f.browser()
	f.signIn(acme, keyAcme)
	f.signIn(globex, keyGlobex)
	for _, tc := range []struct {
		name   string
		c      *http.Client
		path   string
		marked []string // hosts shown reviewed
	}{
		{"every tenant's view", all, "/destinations?since=", []string{"evil.example"}},
		{"acme's view of a reviewer of all", all, "/destinations?since=&tenant=acme", []string{"api.example"}},
		{"globex's view of a reviewer of all", all, "/destinations?since=&tenant=globex", nil},
		{"acme's reviewer", one, "/destinations?since=", []string{"api.example"}},
		{"acme itself", acme, "/destinations?since=", []string{"api.example"}},
		{"globex itself", globex, "/destinations?since=", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, body := f.get(tc.c, tc.path)
			for _, host := range []string{"api.example", "evil.example"} {
				row := regexp.MustCompile(`(?s)<tr data-host="` + regexp.QuoteMeta(host) + `">.*?</tr>`).FindString(body)
				if row == "" {
					t.Fatalf("%s lists no row for %s", tc.path, host)
				}
				want := false
				for _, m := range tc.marked {
					want = want || m == host
				}
				if got := strings.Contains(row, `class="reviewed"`); got != want {
					t.Errorf("%s: %s reviewed %v, want %v", tc.path, host, got, want)
				}
			}
			if strings.Contains(body, "l-globex also went here") && tc.c != all {
				t.Errorf("%s shows the note of a mark made over every tenant's traffic", tc.path)
			}
		})
	}
}
