package scope

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Profiles are named bundles of scopes a token asks for by name ("profiles": ["pypi"]), so an
// operator decides once what "may install from PyPI" means. Expand turns names into scopes,
// each tagged with its profile.
type Profiles map[string]Set

// readOnly is what a registry that is only read needs.
var readOnly = []string{"GET", "HEAD"}

// Builtin are the profiles every deployment has; the configuration may replace or add to them.
// The hosts are the public registries' own. Registries some machines reach through a mirror of
// their own (the npm registry, Go modules, Debian's archive) are left to the configuration.
func Builtin() Profiles {
	ro := func(hosts ...string) []Scope {
		out := make([]Scope, len(hosts))
		for i, h := range hosts {
			out[i] = Scope{Host: h, Ports: []int{443}, Methods: readOnly}
		}
		return out
	}
	defs := map[string][]Scope{
		"pypi":     ro("pypi.org", "files.pythonhosted.org"),
		"maven":    ro("repo.maven.apache.org", "repo1.maven.org"),
		"crates":   ro("index.crates.io", "static.crates.io", "crates.io"),
		"rubygems": ro("rubygems.org", "index.rubygems.org"),
		// Read-only GitHub: the API and raw files read, and git fetches (whose negotiation
		// is a POST to git-upload-pack); git-receive-pack, a push, matches nothing.
		"github-read": append(ro("api.github.com", "codeload.github.com", "raw.githubusercontent.com", "objects.githubusercontent.com"),
			Scope{Host: "github.com", Ports: []int{443}, Methods: readOnly},
			Scope{Host: "github.com", Ports: []int{443}, Methods: []string{"POST"}, Paths: []string{"/*/*/git-upload-pack"}}),
	}
	out := Profiles{}
	for name, scopes := range defs {
		set, err := Parse(scopes)
		if err != nil {
			panic(fmt.Sprintf("built-in profile %s: %v", name, err))
		}
		out[name] = set
	}
	return out
}

// Names lists the profiles, sorted.
func (p Profiles) Names() []string {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Expand returns the scopes of the profiles named, in order, each tagged with its profile; a
// name the deployment does not define is an error that lists the ones it does.
func (p Profiles) Expand(names []string) (Set, error) {
	var out Set
	var seen []string
	for _, n := range names {
		if slices.Contains(seen, n) {
			continue
		}
		seen = append(seen, n)
		set, ok := p[n]
		if !ok {
			return nil, fmt.Errorf("%w: profile %q is not defined here (defined: %s)", ErrInvalid, n, strings.Join(p.Names(), ", "))
		}
		for _, s := range set {
			s.Profile = n
			out = append(out, s)
		}
	}
	return out, nil
}
