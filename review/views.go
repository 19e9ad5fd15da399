package review

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Bounds of the views. An overview lists at most maxLeases leases; a ledger page holds
// ledgerPage records (the next page follows its cursor); the destinations and denials views add
// up at most maxScan records and say so when there were more.
const (
	maxLeases  = 500
	ledgerPage = 500
	maxScan    = 200000
	maxListed  = 8 // leases named per destination or denial group
)

// page is what every view's template gets.
type page struct {
	Title   string
	View    string
	Session *session
	F       filter
	Took    time.Duration
	Marks   map[string]*mark
	// Back is the view's own address, where a form on it returns.
	Back string
	// Implied are the filters the view adds to the URL's (a ledger's lease, the denials view's
	// decision), which its export and live tail carry too, so they are exactly the view.
	Implied []string
}

// ExportLink is the view's export in format: its filters and those it implies.
func (p page) ExportLink(format string) string {
	return p.F.Link("/export", append([]string{"format", format}, p.Implied...)...)
}

// TailLink is the live tail of the view's filters and those it implies.
func (p page) TailLink() string { return p.F.Link("/tail", p.Implied...) }

// flushed makes the records accepted so far visible, so a view shows what just happened.
func (s *Server) flushed(w http.ResponseWriter, r *http.Request) bool {
	if err := s.cfg.Trail.Flush(r.Context()); err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit trail cannot be read now: "+err.Error())
		return false
	}
	return true
}

func (s *Server) view(w http.ResponseWriter, r *http.Request, title, name string) (page, bool) {
	f, err := s.filterOf(r)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return page{}, false
	}
	if !s.flushed(w, r) {
		return page{}, false
	}
	return page{Title: title, View: name, Session: sessionOf(r), F: f, Back: r.URL.RequestURI()}, true
}

// overviewLease is one row of the overview.
type overviewLease struct {
	audit.LeaseSummary
	Chain string
}

type overviewData struct {
	page
	Leases                   []overviewLease
	Total                    int // the leases that meet the filters; Leases lists the first maxLeases
	More                     bool
	Records, Denied, Flagged int
	BytesUp, BytesDown       int64
	Hosts                    int
	HostsAtLeast             bool
	Rules                    []count
}

type count struct {
	Name string
	N    int
}

// overview lists the leases active in the time range that meet the filters, summaries first,
// from the audit index's tallies (never by reading the records).
func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p, ok := s.view(w, r, "Leases", "overview")
	if !ok {
		return
	}
	// Every lease of the range is summed (from tallies in memory); the table lists the most
	// recently active.
	ls, _, err := s.cfg.Trail.Leases(r.Context(), audit.LeaseQuery{Query: p.F.Q})
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit index cannot be read: "+err.Error())
		return
	}
	d := overviewData{page: p, Total: len(ls), More: len(ls) > maxLeases}
	ckpt := s.cfg.Checkpoint()
	hosts, rules := map[string]bool{}, map[string]int{}
	for i, l := range ls {
		if i < maxLeases {
			chain := "signed (checkpoint covers its last record)"
			if l.Last > ckpt {
				chain = "not yet under a checkpoint"
			}
			d.Leases = append(d.Leases, overviewLease{LeaseSummary: l, Chain: chain})
		}
		d.Records += l.Records
		d.Denied += l.Denied
		d.Flagged += l.Flagged
		d.BytesUp += l.BytesUp
		d.BytesDown += l.BytesDown
		for _, h := range l.Hosts {
			hosts[h] = true
		}
		d.HostsAtLeast = d.HostsAtLeast || l.HostsCut
		for k, v := range l.Rules {
			rules[k] += v
		}
	}
	d.Hosts, d.Rules = len(hosts), sortedCounts(rules)
	d.Marks = s.marks(r, p.F.Q.Tenant)
	d.Took = time.Since(start)
	s.render(w, "overview.html", d)
}

func sortedCounts(m map[string]int) []count {
	out := make([]count, 0, len(m))
	for k, v := range m {
		out = append(out, count{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N > out[j].N || out[i].N == out[j].N && out[i].Name < out[j].Name })
	return out
}

type ledgerData struct {
	page
	Lease  audit.LeaseSummary
	Chain  string
	Verify *audit.Report
	VerErr string
	Rows   []row
	Next   uint64
	More   bool
	Issues []audit.Problem
}

// errNoLease is the one answer for a lease the session cannot read, whether it exists or not.
var errNoLease = errors.New("no such lease in the trail this session reads")

// lease returns the summary of one lease the session may read.
func (s *Server) lease(r *http.Request, id, tenant string) (audit.LeaseSummary, error) {
	ls, _, err := s.cfg.Trail.Leases(r.Context(), audit.LeaseQuery{Query: audit.Query{Lease: id, Tenant: tenant}})
	if err != nil {
		return audit.LeaseSummary{}, err
	}
	if len(ls) == 0 || !sessionOf(r).sees(ls[0].Tenant) {
		return audit.LeaseSummary{}, errNoLease
	}
	return ls[0], nil
}

// ledger is one lease's story as a timeline: every record of it that meets the filters (the time
// range included), oldest first, each explaining itself; lookups are tied to the connections
// that followed them.
func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p, ok := s.view(w, r, "Lease", "ledger")
	if !ok {
		return
	}
	id := r.PathValue("id")
	l, err := s.lease(r, id, p.F.Q.Tenant)
	if errors.Is(err, errNoLease) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("lease %q: %v", id, err))
		return
	} else if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit index cannot be read: "+err.Error())
		return
	}
	p.Implied = []string{"lease", id}
	d := ledgerData{page: p, Lease: l}
	d.Title = "Lease " + id
	d.Chain = "signed: the node's latest checkpoint covers its last record"
	if l.Last > s.cfg.Checkpoint() {
		d.Chain = "not yet under a checkpoint (the node signs one every few seconds and at the lease's end)"
	}
	q := p.F.Q
	q.Lease, q.Tenant, q.Limit = id, l.Tenant, ledgerPage
	if a := r.URL.Query().Get("after"); a != "" {
		if q.After, err = strconv.ParseUint(a, 10, 64); err != nil {
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("after %q is not a cursor", a))
			return
		}
	}
	lookups := map[string]int{} // host -> row index of the lease's last lookup of it
	res, err := s.cfg.Trail.Query(r.Context(), q, func(rec audit.Record) error {
		x := newRow(rec)
		switch {
		case rec.Kind == audit.KindDNS && rec.Decision == audit.Allow && rec.Event == "":
			lookups[normal(rec.QName)] = len(d.Rows)
		case rec.Kind == audit.KindHTTP && rec.Event != audit.EventClose:
			if i, ok := lookups[normal(rec.Host)]; ok {
				look := &d.Rows[i]
				x.Related = fmt.Sprintf("after the lookup at seq %d (%s before)", look.R.Seq, rec.Time.Sub(look.R.Time).Round(time.Millisecond))
				if look.Related == "" {
					look.Related = fmt.Sprintf("followed by a connection at seq %d", rec.Seq)
				}
			}
		}
		d.Rows = append(d.Rows, x)
		return nil
	})
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit trail cannot be read: "+err.Error())
		return
	}
	for i := range d.Rows {
		if x := &d.Rows[i]; x.R.Kind == audit.KindDNS && x.R.Decision == audit.Allow && x.R.Event == "" && x.Related == "" {
			x.Related = "no connection to it follows on this page"
		}
	}
	d.Next, d.More, d.Issues = res.Next, res.More, res.Problems
	if r.URL.Query().Get("verify") == "1" && s.cfg.Verify != nil {
		if !s.acts.Allow(sessionOf(r).CSRF) {
			d.VerErr = "too many verifications from this session; try again in a second"
		} else if d.Verify, err = s.cfg.Verify(r.Context(), id); err != nil {
			d.VerErr = err.Error()
		}
	}
	d.Marks = s.marks(r, l.Tenant)
	d.Took = time.Since(start)
	s.render(w, "ledger.html", d)
}

func normal(h string) string { return audit.NormalHost(h) }

// destination is one host and port as the destinations view adds it up.
type destination struct {
	Host                 string
	Port                 int
	Requests, Allowed    int
	Denied               int
	BytesUp, BytesDown   int64
	First, Last          time.Time
	Inspected, Tunnelled bool
	Leases               leaseList
}

// leaseList names the first maxListed leases added and counts the others.
type leaseList struct {
	Names []string
	More  int
	seen  map[string]bool
}

func (l *leaseList) add(id string) {
	if id == "" || l.seen[id] {
		return
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[id] = true
	if len(l.Names) < maxListed {
		l.Names = append(l.Names, id)
	} else {
		l.More++
	}
}

type scanData struct {
	page
	Scanned int
	Cut     bool
	Issues  []audit.Problem
}

type destinationsData struct {
	scanData
	Destinations []*destination
}

// scan adds up the records of the view's filters (and of q's changes), at most maxScan of them.
func (s *Server) scan(r *http.Request, q audit.Query, fn func(audit.Record)) (scanData, error) {
	var d scanData
	q.Limit = maxScan
	res, err := s.cfg.Trail.Query(r.Context(), q, func(rec audit.Record) error {
		d.Scanned++
		fn(rec)
		return nil
	})
	d.Cut, d.Issues = res.More, res.Problems
	return d, err
}

// destinations adds up, per host and port, the requests and tunnels the filters select: how
// many, bytes each way, first and last seen, inspected or tunnelled, by which leases.
func (s *Server) destinations(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p, ok := s.view(w, r, "Destinations", "destinations")
	if !ok {
		return
	}
	q := p.F.Q
	if q.Kind == "" {
		q.Kind = string(audit.KindHTTP)
		p.Implied = []string{"kind", q.Kind}
	}
	byKey := map[string]*destination{}
	sd, err := s.scan(r, q, func(rec audit.Record) {
		if rec.Kind != audit.KindHTTP {
			return
		}
		key := normal(rec.Host) + ":" + strconv.Itoa(rec.Port)
		x := byKey[key]
		if x == nil {
			x = &destination{Host: normal(rec.Host), Port: rec.Port, First: rec.Time}
			byKey[key] = x
		}
		x.Last = rec.Time
		x.BytesUp += rec.BytesUp
		x.BytesDown += rec.BytesDown
		switch rec.Event {
		case "close":
			return
		case "open":
			x.Tunnelled = true
		default:
			x.Inspected = true
		}
		x.Requests++
		if rec.Decision == audit.Deny {
			x.Denied++
		} else {
			x.Allowed++
		}
		x.Leases.add(rec.Lease)
	})
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit trail cannot be read: "+err.Error())
		return
	}
	d := destinationsData{scanData: sd}
	d.page = p
	for _, x := range byKey {
		d.Destinations = append(d.Destinations, x)
	}
	sort.Slice(d.Destinations, func(i, j int) bool {
		a, b := d.Destinations[i], d.Destinations[j]
		return a.Requests > b.Requests || a.Requests == b.Requests && a.Host+strconv.Itoa(a.Port) < b.Host+strconv.Itoa(b.Port)
	})
	d.Marks = s.marks(r, p.F.Q.Tenant)
	d.Took = time.Since(start)
	s.render(w, "destinations.html", d)
}

// denialGroup is the denials of one rule to one destination.
type denialGroup struct {
	Kind, Host  string
	Port        int
	Count       int
	First, Last time.Time
	Example     row
	Leases      leaseList
}

type ruleGroup struct {
	Rule   string
	Count  int
	Groups []*denialGroup
}

type denialsData struct {
	scanData
	Rules []*ruleGroup
}

// denials groups the denials the filters select by rule, then by destination, each with what
// would have allowed it.
func (s *Server) denials(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	p, ok := s.view(w, r, "Denials", "denials")
	if !ok {
		return
	}
	q := p.F.Q
	if q.Decision == string(audit.Allow) {
		s.fail(w, r, http.StatusBadRequest, "decision=allow selects no denials: remove it from the filters to see them")
		return
	}
	q.Decision = string(audit.Deny)
	p.Implied = []string{"decision", q.Decision}
	rules := map[string]*ruleGroup{}
	groups := map[string]*denialGroup{}
	sd, err := s.scan(r, q, func(rec audit.Record) {
		host := normal(rec.Host)
		if rec.Kind == audit.KindDNS {
			host = normal(rec.QName)
		}
		rg := rules[string(rec.Rule)]
		if rg == nil {
			rg = &ruleGroup{Rule: string(rec.Rule)}
			rules[string(rec.Rule)] = rg
		}
		rg.Count++
		key := fmt.Sprintf("%s\x00%s\x00%s\x00%d", rec.Rule, rec.Kind, host, rec.Port)
		g := groups[key]
		if g == nil {
			g = &denialGroup{Kind: string(rec.Kind), Host: host, Port: rec.Port, First: rec.Time, Example: newRow(rec)}
			groups[key] = g
			rg.Groups = append(rg.Groups, g)
		}
		g.Count++
		g.Last = rec.Time
		g.Leases.add(rec.Lease)
	})
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, "the audit trail cannot be read: "+err.Error())
		return
	}
	d := denialsData{scanData: sd}
	d.page = p
	for _, rg := range rules {
		sort.Slice(rg.Groups, func(i, j int) bool { return rg.Groups[i].Count > rg.Groups[j].Count })
		d.Rules = append(d.Rules, rg)
	}
	sort.Slice(d.Rules, func(i, j int) bool { return d.Rules[i].Count > d.Rules[j].Count })
	d.Took = time.Since(start)
	s.render(w, "denials.html", d)
}
