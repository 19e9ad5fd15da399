// Package suggest reads what a lease did from its records and says which token would have
// allowed exactly that: the narrowest scopes (hosts, ports, methods, path prefixes, the
// credentials injected), the scopes granted and never used, and the denials a person might want
// to allow, each with the scope that would have.
package suggest

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/receipt"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// MaxPrefixes bounds the path prefixes one scope lists: beyond it, prefixes are widened a
// segment at a time (a lease that fetched a thousand files under /pkg/ gets "/pkg/*").
const MaxPrefixes = 8

// Suggestion is what a lease's records say about its token.
type Suggestion struct {
	Lease string `json:"lease"`
	// Scopes would have allowed every request the lease made, and no other destination.
	Scopes []scope.Scope `json:"scopes"`
	// Unused are the scopes the token granted (as records name them) that allowed nothing.
	Unused []string `json:"unused"`
	// Denied are the refusals of destinations no scope covered, grouped, with the scope that
	// would have allowed each.
	Denied []Denial `json:"denied"`
}

// Denial is one group of refused requests or names.
type Denial struct {
	Kind   string      `json:"kind"`
	What   string      `json:"what"`
	Count  int         `json:"count"`
	Reason string      `json:"reason"` // the first one's
	Scope  scope.Scope `json:"scope"`
}

// cutPrefix begins the reason of every record of what the gateway's recheck cut; records written
// before audit.EventCut carry only it.
const cutPrefix = "cut by the recheck: "

// wasCut reports whether r is the record of something the gateway cut, or refused at its last
// decision, because its lease no longer allowed it.
func wasCut(r audit.Record) bool {
	return r.Event == audit.EventCut || r.Kind == audit.KindHTTP && strings.HasPrefix(r.Reason, cutPrefix)
}

// For builds the suggestion from a lease's records, oldest first.
func For(lease string, recs []audit.Record) (Suggestion, error) {
	b := receipt.NewBuilder()
	type key struct {
		host       string
		port       int
		credential string
		tunnel     bool
	}
	groups := map[key]*struct {
		methods map[string]bool
		paths   map[string]bool
	}{}
	var order []key
	denied := map[string]*Denial{}
	var deniedOrder []string
	for _, r := range recs {
		if r.Lease != lease {
			continue
		}
		b.Add(r)
		switch {
		case r.Kind == audit.KindHTTP && r.Decision == audit.Allow && r.Event != audit.EventClose:
			k := key{host: strings.ToLower(r.Host), port: r.Port, credential: r.Credential, tunnel: r.Event == audit.EventOpen}
			g := groups[k]
			if g == nil {
				g = &struct {
					methods map[string]bool
					paths   map[string]bool
				}{map[string]bool{}, map[string]bool{}}
				groups[k] = g
				order = append(order, k)
			}
			if !k.tunnel {
				g.methods[r.Method] = true
				g.paths[r.Path] = true
			}
		case r.Decision == audit.Deny && (r.Rule == rule.ScopeMiss || r.Rule == rule.QType) &&
			r.Event != audit.EventClose && !wasCut(r):
			// A close record's decision is its tunnel's, counted when it opened; a cut is what the
			// operator took away, never a destination the task asked for anew.
			sc, ok := Narrowest(r)
			if !ok {
				continue
			}
			what := denialWhat(r)
			d := denied[what]
			if d == nil {
				d = &Denial{Kind: string(r.Kind), What: what, Reason: r.Reason, Scope: sc}
				denied[what] = d
				deniedOrder = append(deniedOrder, what)
			}
			d.Count++
		}
	}
	s := Suggestion{Lease: lease, Scopes: []scope.Scope{}, Unused: []string{}, Denied: []Denial{}}
	for _, k := range order {
		g := groups[k]
		sc := scope.Scope{Host: k.host, Credential: k.credential, Tunnel: k.tunnel}
		if k.port != 443 && k.port != 80 || k.tunnel {
			sc.Ports = []int{k.port}
		}
		if !k.tunnel {
			sc.Methods = sortedKeys(g.methods)
			sc.Paths = Prefixes(sortedKeys(g.paths))
		}
		s.Scopes = append(s.Scopes, sc)
	}
	if _, err := scope.Parse(s.Scopes); err != nil {
		return s, fmt.Errorf("suggest: the scopes made from lease %s's records do not parse: %w", lease, err)
	}
	rc := b.Receipt()
	for _, g := range rc.ScopesGranted {
		if !slices.Contains(rc.ScopesUsed, g) {
			s.Unused = append(s.Unused, g)
		}
	}
	for _, w := range deniedOrder {
		s.Denied = append(s.Denied, *denied[w])
	}
	sort.SliceStable(s.Denied, func(i, j int) bool { return s.Denied[i].Count > s.Denied[j].Count })
	return s, nil
}

func denialWhat(r audit.Record) string {
	if r.Kind == audit.KindDNS {
		return fmt.Sprintf("%s %s", strings.TrimSuffix(strings.ToLower(r.QName), "."), r.QType)
	}
	return fmt.Sprintf("%s %s:%d%s", r.Method, strings.ToLower(r.Host), r.Port, r.Path)
}

// Narrowest is the narrowest scope that would have allowed a record a scope did not: its host,
// its port when not a default one, its method and its exact path; for a question, the name (and
// the query type when the resolver does not answer it by default).
func Narrowest(r audit.Record) (scope.Scope, bool) {
	var sc scope.Scope
	switch r.Kind {
	case audit.KindDNS:
		sc.Host = strings.TrimSuffix(strings.ToLower(r.QName), ".")
		if r.Rule == rule.QType {
			sc.DNSTypes = []string{r.QType}
		}
	case audit.KindHTTP:
		sc.Host = strings.TrimSuffix(strings.ToLower(r.Host), ".")
		if r.Port != 0 && r.Port != 443 && r.Port != 80 {
			sc.Ports = []int{r.Port}
		}
		if r.Method != "" && r.Method != "CONNECT" {
			sc.Methods = []string{r.Method}
		}
		if r.Path != "" {
			sc.Paths = []string{r.Path}
		}
	default:
		return sc, false
	}
	if sc.Host == "" {
		return sc, false
	}
	if _, err := scope.Parse([]scope.Scope{sc}); err != nil {
		return sc, false // a name no scope can name (malformed, an address literal)
	}
	return sc, true
}

// Prefixes turns the paths a scope must allow into at most MaxPrefixes globs: each path's
// folder with "/*" (a path directly under the root stays exact), the folders cut a segment at a
// time while there are more than MaxPrefixes, down to "/*".
func Prefixes(paths []string) []string {
	depth := 0
	for _, p := range paths {
		depth = max(depth, len(folder(p)))
	}
	for depth = max(depth, 1); depth > 0; depth-- {
		set := map[string]bool{}
		for _, p := range paths {
			set[prefixAt(p, depth)] = true
		}
		if len(set) <= MaxPrefixes {
			return sortedKeys(set)
		}
	}
	return []string{"/*"}
}

// folder is the segments of p's folder ("/a/b/c" gives a, b).
func folder(p string) []string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	return segs[:len(segs)-1]
}

// prefixAt is the glob for p with its folder cut to depth segments (at least one); a path
// directly under the root is itself. Glob characters a path holds are escaped.
func prefixAt(p string, depth int) string {
	f := folder(p)
	if len(f) == 0 {
		return globEscape(p)
	}
	if len(f) > depth {
		f = f[:depth]
	}
	return "/" + globEscape(strings.Join(f, "/")) + "/*"
}

// globEscape makes s match itself as a path.Match pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune("*?[\\", c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
