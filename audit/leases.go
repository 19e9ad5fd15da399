package audit

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// LeaseSummary is what the trail knows of one lease without reading its records: each segment's
// index tallies the leases it holds, and a summary adds up the segments asked about. It is what
// an overview of many leases reads, so a day of a thousand leases and ten million records is
// answered from memory.
type LeaseSummary struct {
	Lease    string `json:"lease"`
	Tenant   string `json:"tenant,omitempty"`
	Task     string `json:"task,omitempty"`
	Template string `json:"template,omitempty"`
	Runtime  string `json:"runtime,omitempty"`
	// First and Last are the seqs of the lease's first and last record; From and To their times.
	First uint64    `json:"first_seq"`
	Last  uint64    `json:"last_seq"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	// Started is the bind's time; Ended the end's, and EndedBy how it ended (release, expiry,
	// reap). Zero when the segments summed hold no such record.
	Started time.Time `json:"started,omitzero"`
	Ended   time.Time `json:"ended,omitzero"`
	EndedBy Event     `json:"ended_by,omitempty"`
	Records int       `json:"records"`
	// Kinds counts records by kind; Rules counts records by rule (allowed ones by "scope").
	Kinds     map[string]int `json:"kinds"`
	Rules     map[string]int `json:"rules,omitempty"`
	Allowed   int            `json:"allowed"`
	Denied    int            `json:"denied"`
	Flagged   int            `json:"flagged"`
	BytesUp   int64          `json:"bytes_up"`
	BytesDown int64          `json:"bytes_down"`
	// Hosts are the names the lease's requests and lookups named, lower case and sorted, at
	// most MaxLeaseHosts of them; HostsCut says there were more.
	Hosts    []string `json:"hosts"`
	HostsCut bool     `json:"hosts_cut,omitempty"`
	// Credentials are the catalog names injected into its requests (never values).
	Credentials []string `json:"credentials"`
	// Segments are the segments summed.
	Segments int `json:"segments"`
}

// MaxLeaseHosts bounds the hosts one lease's tally lists per segment: a sandbox picks the names
// it asks for, so a list without a bound would be as long as it likes. Beyond it, HostsCut is
// set, and a filter on a host the list lacks asks the segment's index.
const MaxLeaseHosts = 64

// maxTallyKeys bounds the kinds and rules one tally counts (both are closed sets the code
// names, never a sandbox's text; the bound keeps a forged index from growing them).
const maxTallyKeys = 64

// leaseTally is a segment's tally of one lease, kept as the writer indexes records.
type leaseTally struct {
	LeaseSummary
	hosts map[string]bool
	creds map[string]bool
	// lastHost, lastKind and lastRule spare the maps a lookup when a record repeats the one
	// before (most do: one lease, one host, one kind of traffic).
	lastHost, lastKind, lastRule string
	kindN, ruleN                 int // the counts for lastKind and lastRule, not yet in the maps
}

func (t *leaseTally) add(r *Record, host string) {
	s := &t.LeaseSummary
	if s.Records == 0 {
		s.Lease, s.Tenant, s.First, s.From = r.Lease, r.Tenant, r.Seq, r.Time
		t.hosts, t.creds = map[string]bool{}, map[string]bool{}
	}
	s.Records++
	s.Last, s.To = r.Seq, r.Time
	if s.Task == "" {
		s.Task = r.Task
	}
	t.countKind(string(r.Kind))
	switch r.Decision {
	case Allow:
		s.Allowed++
	case Deny:
		s.Denied++
	}
	if r.Rule != "" {
		t.countRule(string(r.Rule))
	}
	if r.Flagged {
		s.Flagged++
	}
	s.BytesUp += r.BytesUp
	s.BytesDown += r.BytesDown
	if host != "" && host != t.lastHost {
		t.lastHost = host
		if !t.hosts[host] {
			if len(t.hosts) < MaxLeaseHosts {
				t.hosts[host] = true
			} else {
				s.HostsCut = true
			}
		}
	}
	if r.Credential != "" && len(t.creds) < MaxLeaseHosts {
		t.creds[r.Credential] = true
	}
	if r.Kind == KindLease {
		switch r.Event {
		case EventBind:
			s.Started, s.Template, s.Runtime = r.Time, r.Template, r.Runtime
		case EventRelease, EventExpiry, EventReap:
			s.Ended, s.EndedBy = r.Time, r.Event
		}
	}
}

// countKind counts a record of kind k: consecutive records of one kind are counted aside and
// added to the map when the kind changes (or the tally is read).
// (The writer calls it under the trail's write lock, so it may change the maps in place.)
func (t *leaseTally) countKind(k string) {
	if k != t.lastKind {
		t.Kinds = addCount(t.Kinds, t.lastKind, t.kindN)
		t.lastKind, t.kindN = k, 0
	}
	t.kindN++
}

func (t *leaseTally) countRule(r string) {
	if r != t.lastRule {
		t.Rules = addCount(t.Rules, t.lastRule, t.ruleN)
		t.lastRule, t.ruleN = r, 0
	}
	t.ruleN++
}

// addCount adds n to m[k], keeping m to maxTallyKeys keys, and returns m (made when nil).
func addCount(m map[string]int, k string, n int) map[string]int {
	if n == 0 {
		return m
	}
	if m == nil {
		m = map[string]int{}
	}
	if len(m) < maxTallyKeys || m[k] > 0 {
		m[k] += n
	}
	return m
}

// counts returns copies of the kind and rule counts with those held aside added (bounded to
// maxTallyKeys keys each). It changes nothing: queries read tallies under a read lock, and the
// writer encodes a sealed one while they may.
func (t *leaseTally) counts() (kinds, rules map[string]int) {
	return addCount(cloneCounts(t.Kinds), t.lastKind, t.kindN), addCount(cloneCounts(t.Rules), t.lastRule, t.ruleN)
}

// summary returns the tally with its sets as sorted lists.
func (t *leaseTally) summary() LeaseSummary {
	s := t.LeaseSummary
	s.Kinds, s.Rules = t.counts()
	s.Hosts, s.Credentials = keysOfMap(t.hosts), keysOfMap(t.creds)
	s.Segments = 1
	return s
}

func cloneCounts(m map[string]int) map[string]int {
	if m == nil {
		return nil
	}
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// keysOfMap returns m's keys, sorted.
func keysOfMap[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// encode appends the tally to an index file's body: the lease, tenant, task, template, runtime
// and how it ended as strings; first and last seq; the times (from, to, started, ended) as
// signed varints of unix nanoseconds, zero for none; the counts; kinds and rules as sorted
// pairs; hosts and credentials sorted; whether the host list was cut.
func (t *leaseTally) encode(b []byte) []byte {
	u := func(v uint64) { b = binary.AppendUvarint(b, v) }
	v := func(x int64) { b = binary.AppendVarint(b, x) }
	s := func(x string) { u(uint64(len(x))); b = append(b, x...) }
	tm := func(x time.Time) {
		if x.IsZero() {
			v(0)
			return
		}
		v(x.UnixNano())
	}
	m := func(c map[string]int) {
		u(uint64(len(c)))
		for _, k := range keysOfMap(c) {
			s(k)
			u(uint64(c[k]))
		}
	}
	l := func(xs []string) {
		u(uint64(len(xs)))
		for _, x := range xs {
			s(x)
		}
	}
	r := t.LeaseSummary
	r.Kinds, r.Rules = t.counts()
	for _, x := range []string{r.Lease, r.Tenant, r.Task, r.Template, r.Runtime, string(r.EndedBy)} {
		s(x)
	}
	u(r.First)
	u(r.Last)
	for _, x := range []time.Time{r.From, r.To, r.Started, r.Ended} {
		tm(x)
	}
	for _, x := range []int{r.Records, r.Allowed, r.Denied, r.Flagged} {
		u(uint64(x))
	}
	v(r.BytesUp)
	v(r.BytesDown)
	m(r.Kinds)
	m(r.Rules)
	l(keysOfMap(t.hosts))
	l(keysOfMap(t.creds))
	if r.HostsCut {
		u(1)
	} else {
		u(0)
	}
	return b
}

// tally reads one lease tally (see leaseTally.encode), checking what a forged index could make
// unbounded: the number of kinds, rules, hosts and credentials.
func (d *decoder) tally() (*leaseTally, error) {
	t := &leaseTally{hosts: map[string]bool{}, creds: map[string]bool{}}
	r := &t.LeaseSummary
	for _, p := range []*string{&r.Lease, &r.Tenant, &r.Task, &r.Template, &r.Runtime} {
		*p = d.s()
	}
	r.EndedBy = Event(d.s())
	r.First, r.Last = d.u(), d.u()
	for _, p := range []*time.Time{&r.From, &r.To, &r.Started, &r.Ended} {
		if n := d.v(); n != 0 {
			*p = time.Unix(0, n).UTC()
		}
	}
	for _, p := range []*int{&r.Records, &r.Allowed, &r.Denied, &r.Flagged} {
		*p = int(d.u())
	}
	r.BytesUp, r.BytesDown = d.v(), d.v()
	counts := func() map[string]int {
		n := d.u()
		if n > maxTallyKeys {
			d.err = errIndex
			return nil
		}
		c := make(map[string]int, n)
		for range n {
			k := d.s()
			c[k] = int(d.u())
		}
		return c
	}
	set := func(m map[string]bool) {
		n := d.u()
		if n > MaxLeaseHosts {
			d.err = errIndex
			return
		}
		for range n {
			m[d.s()] = true
		}
	}
	r.Kinds = counts()
	if r.Rules = counts(); len(r.Rules) == 0 {
		r.Rules = nil
	}
	set(t.hosts)
	set(t.creds)
	r.HostsCut = d.u() == 1
	if d.err != nil || r.Lease == "" {
		return nil, fmt.Errorf("%w: a lease tally is unreadable", errIndex)
	}
	return t, nil
}

// merge adds o (a later segment's tally of the same lease) to s.
func (s *LeaseSummary) merge(o LeaseSummary) {
	if s.Segments == 0 {
		*s = o
		s.Kinds, s.Rules = cloneCounts(o.Kinds), cloneCounts(o.Rules)
		s.Hosts, s.Credentials = slices.Clone(o.Hosts), slices.Clone(o.Credentials)
		return
	}
	s.Segments += o.Segments
	s.Records += o.Records
	s.Last, s.To = max(s.Last, o.Last), laterOf(s.To, o.To)
	if o.First < s.First {
		s.First, s.From = o.First, o.From
	}
	s.Task, s.Template, s.Runtime = cmp.Or(s.Task, o.Task), cmp.Or(s.Template, o.Template), cmp.Or(s.Runtime, o.Runtime)
	if !o.Started.IsZero() {
		s.Started = o.Started
	}
	if !o.Ended.IsZero() {
		s.Ended, s.EndedBy = o.Ended, o.EndedBy
	}
	s.Allowed, s.Denied, s.Flagged = s.Allowed+o.Allowed, s.Denied+o.Denied, s.Flagged+o.Flagged
	s.BytesUp, s.BytesDown = s.BytesUp+o.BytesUp, s.BytesDown+o.BytesDown
	for k, v := range o.Kinds {
		if s.Kinds == nil {
			s.Kinds = map[string]int{}
		}
		s.Kinds[k] += v
	}
	for k, v := range o.Rules {
		if s.Rules == nil {
			s.Rules = map[string]int{}
		}
		s.Rules[k] += v
	}
	s.Hosts, s.HostsCut = union(s.Hosts, o.Hosts, s.HostsCut || o.HostsCut)
	s.Credentials, _ = union(s.Credentials, o.Credentials, false)
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// union merges two sorted lists, keeping at most MaxLeaseHosts; cut reports whether any was
// left out (or already had been).
func union(a, b []string, cut bool) ([]string, bool) {
	out := make([]string, 0, min(len(a)+len(b), MaxLeaseHosts))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var v string
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			v, i = a[i], i+1
		case i == len(a) || b[j] < a[i]:
			v, j = b[j], j+1
		default:
			v, i, j = a[i], i+1, j+1
		}
		if len(out) == MaxLeaseHosts {
			return out, true
		}
		out = append(out, v)
	}
	return out, cut
}

// LeaseQuery selects leases for an overview. A lease is listed when its records in the
// segments that overlap [Since, Until] have something of each filter set: a tenant, lease or
// task is the lease's; Decision deny means at least one denial (allow, one allowed request);
// Flagged, one flagged record; Kind, one record of that kind; Rule, one denial by that rule;
// Host, one request or lookup of that name (Event and After are not tallied and select every
// lease). The filters are tested on the lease's tallies, so
// two may be met by different records of it: the overview never leaves out a lease that has a
// record matching them all, and the lease's ledger, queried with the same filters, shows exactly
// the records that match.
type LeaseQuery struct {
	Query
}

// leaseLevel reports whether s meets every filter of q that its tally can answer, and whether
// the host filter is left for the index to decide (the tally's host list was cut).
func (q LeaseQuery) leaseLevel(s *LeaseSummary) (ok, askIndex bool) {
	switch {
	case q.Tenant != "" && s.Tenant != q.Tenant,
		q.Lease != "" && s.Lease != q.Lease,
		q.Task != "" && s.Task != q.Task,
		!q.Since.IsZero() && s.To.Before(q.Since),
		!q.Until.IsZero() && s.From.After(q.Until),
		q.Decision == string(Deny) && s.Denied == 0,
		q.Decision == string(Allow) && s.Allowed == 0,
		q.Flagged && s.Flagged == 0,
		q.Kind != "" && s.Kinds[q.Kind] == 0,
		q.Rule != "" && s.Rules[q.Rule] == 0:
		return false, false
	}
	if h := normalHost(q.Host); h != "" {
		if _, found := slices.BinarySearch(s.Hosts, h); !found {
			return s.HostsCut, s.HostsCut
		}
	}
	return true, false
}

// leases answers q over segs: each segment's tallies of the leases active in the time range,
// summed per lease, newest activity first. Limit bounds the answer (more reports a cut).
func leases(ctx context.Context, segs []segView, q LeaseQuery) ([]LeaseSummary, bool, error) {
	byLease := map[string]*LeaseSummary{}
	var order []string
	add := func(s LeaseSummary) {
		m := byLease[s.Lease]
		if m == nil {
			m = &LeaseSummary{}
			byLease[s.Lease] = m
			order = append(order, s.Lease)
		}
		m.merge(s)
	}
	for _, sv := range segs {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if !q.Since.IsZero() && sv.sum.Records > 0 && sv.sum.To.Before(q.Since) ||
			!q.Until.IsZero() && sv.sum.From.After(q.Until) {
			continue
		}
		for _, s := range sv.sum.Leases {
			if q.Tenant != "" && s.Tenant != q.Tenant || q.Lease != "" && s.Lease != q.Lease ||
				!q.Since.IsZero() && s.To.Before(q.Since) || !q.Until.IsZero() && s.From.After(q.Until) {
				continue
			}
			add(s)
		}
	}
	out := make([]LeaseSummary, 0, len(order))
	for _, id := range order {
		s := byLease[id]
		ok, ask := q.leaseLevel(s)
		if ask {
			var err error
			if ok, err = hasMatch(ctx, segs, q.Query, s); err != nil {
				return nil, false, err
			}
		}
		if ok {
			out = append(out, *s)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].To.Equal(out[j].To) {
			return out[i].To.After(out[j].To)
		}
		return out[i].Lease < out[j].Lease
	})
	if q.Limit > 0 && len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// hasMatch asks the index whether the lease has a record of the query's host (its tally's host
// list was cut): the postings of the host and the lease narrow it to the records that may.
func hasMatch(ctx context.Context, segs []segView, q Query, s *LeaseSummary) (bool, error) {
	found := false
	_, err := query(ctx, segs, Query{Lease: s.Lease, Tenant: s.Tenant, Host: q.Host, Since: q.Since, Until: q.Until, Limit: 1},
		func(Record) error { found = true; return nil })
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return found, err
}

// Leases answers q over the trail as written so far, from the segments' tallies alone (see
// LeaseQuery); more reports that Limit cut the answer.
func (s *FileSink) Leases(ctx context.Context, q LeaseQuery) ([]LeaseSummary, bool, error) {
	s.xmu.RLock()
	segs := make([]segView, 0, len(s.sealed)+1)
	for _, g := range s.sealed {
		segs = append(segs, sealedView(s.cfg.Dir, g, s.cache))
	}
	x, n := s.active.view([nFields]string{}), s.flushed
	live := s.active.summaryOf(s.actName, 0)
	s.xmu.RUnlock()
	x.Seqs, x.Offsets = x.Seqs[:n], x.Offsets[:n+1]
	segs = append(segs, segView{path: filepath.Join(s.cfg.Dir, s.actName), live: x, n: n, sum: live})
	return leases(ctx, segs, q)
}

// Leases answers q over the trail (see LeaseQuery).
func (t *Trail) Leases(ctx context.Context, q LeaseQuery) ([]LeaseSummary, bool, error) {
	return leases(ctx, t.segs, q)
}
