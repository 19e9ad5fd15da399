package scope

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// ErrInvalid is wrapped by every error Parse returns for a malformed scope.
var ErrInvalid = errors.New("invalid scope")

// Scope is one destination a task may reach, as written in the token's "scopes" claim.
// Exactly one of Host and CIDR is set.
type Scope struct {
	// Host is an exact name or a name with one leading "*." label wildcard. IDNs are kept in
	// punycode once parsed.
	Host string `json:"host,omitempty" yaml:"host"`
	// CIDR allows IP-literal destinations inside a public range.
	CIDR string `json:"cidr,omitempty" yaml:"cidr"`
	// Ports the scope covers; empty means 443 and 80.
	Ports []int `json:"ports,omitempty" yaml:"ports"`
	// Methods the scope covers, upper case; empty means every method.
	Methods []string `json:"methods,omitempty" yaml:"methods"`
	// Paths are globs in path.Match syntax where a trailing "/*" also covers deeper paths;
	// empty means every path. They are matched against the request path as it is sent, in its
	// percent-encoded form (see CheckPath).
	Paths []string `json:"paths,omitempty" yaml:"paths"`
	// Credential names the catalog entry injected into matching requests, if any.
	Credential string `json:"credential,omitempty" yaml:"credential"`
	// Tunnel allows an uninspected CONNECT to the scope's ports.
	Tunnel bool `json:"tunnel,omitempty" yaml:"tunnel"`
	// DNSTypes lets the resolver answer these query types (for example "TXT") for the scope's
	// names, beyond A, AAAA, CNAME, HTTPS and SVCB.
	DNSTypes []string `json:"dns_types,omitempty" yaml:"dns_types"`
	// Git narrows a scope on a git host to git's smart HTTP: which repositories may be fetched,
	// which refs pushed, whether refs may be deleted (see Git).
	Git *Git `json:"git,omitempty" yaml:"git"`
	// MCP narrows a scope on an MCP server's host to the tools a task may call (see MCP).
	MCP *MCP `json:"mcp,omitempty" yaml:"mcp"`
	// Approval holds the requests it matches until a reviewer answers (see Approval).
	Approval Approval `json:"approval,omitzero" yaml:"approval"`
	// Profile names the profile the scope came from, when the deployment expanded a token's
	// "profiles" into it; the verifier clears it on scopes a token writes itself.
	Profile string `json:"profile,omitempty" yaml:"-"`

	prefix netip.Prefix
}

// Set is a task's scopes in the order the token lists them; the first match wins.
type Set []Scope

// DefaultPorts are the ports a scope covers when it names none.
var DefaultPorts = []int{443, 80}

// Parse validates scopes and returns them in canonical form (punycode host, upper-case methods).
func Parse(in []Scope) (Set, error) {
	out := make(Set, 0, len(in))
	for i, s := range in {
		c, err := s.canonical()
		if err != nil {
			return nil, fmt.Errorf("%w: scopes[%d]: %v", ErrInvalid, i, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (s Scope) canonical() (Scope, error) {
	switch {
	case s.Host != "" && s.CIDR != "":
		return s, errors.New("host and cidr are exclusive")
	case s.Host == "" && s.CIDR == "":
		return s, errors.New("host or cidr is required")
	case s.Host != "":
		h, err := CanonicalHost(strings.TrimPrefix(s.Host, "*."))
		if err != nil {
			return s, fmt.Errorf("host %q: %v", s.Host, err)
		}
		if strings.HasPrefix(s.Host, "*.") {
			if !strings.Contains(h, ".") {
				return s, fmt.Errorf("host %q: a wildcard needs at least two labels after it", s.Host)
			}
			h = "*." + h
		}
		if _, err := netip.ParseAddr(h); err == nil {
			return s, fmt.Errorf("host %q is an IP address; use cidr", s.Host)
		}
		s.Host = h
	default:
		p, err := netip.ParsePrefix(s.CIDR)
		if err != nil {
			return s, fmt.Errorf("cidr %q: %v", s.CIDR, err)
		}
		p = p.Masked()
		if !IsPublicPrefix(p) {
			return s, fmt.Errorf("cidr %q covers non-public addresses", s.CIDR)
		}
		s.prefix, s.CIDR = p, p.String()
	}
	for _, p := range s.Ports {
		if p < 1 || p > 65535 {
			return s, fmt.Errorf("port %d out of range", p)
		}
	}
	methods, err := canonicalMethods(s.Methods)
	if err != nil {
		return s, err
	}
	s.Methods = methods
	if err := checkGlobs(s.Paths); err != nil {
		return s, err
	}
	if s.DNSTypes != nil {
		types := make([]string, len(s.DNSTypes))
		for i, t := range s.DNSTypes {
			t = strings.ToUpper(strings.TrimSpace(t))
			if t == "" || t == "ANY" || t == "AXFR" || t == "IXFR" || strings.ContainsAny(t, " \t") {
				return s, fmt.Errorf("dns_types: %q cannot be allowed", t)
			}
			types[i] = t
		}
		s.DNSTypes = types
	}
	if s.Tunnel && len(s.Ports) == 0 {
		return s, errors.New("a tunnel scope must name its ports")
	}
	if s.Git != nil {
		g, err := s.Git.canonical()
		if err != nil {
			return s, fmt.Errorf("git: %v", err)
		}
		if s.Tunnel {
			return s, errors.New("git: a tunnel is not inspected, so its refs could not be checked")
		}
		s.Git = g
	}
	if s.Approval.On {
		a, err := s.Approval.canonical()
		if err != nil {
			return s, err
		}
		if s.Tunnel {
			return s, errors.New("approval: a tunnel is not inspected, so there is no request to hold")
		}
		s.Approval = a
	}
	if s.MCP != nil {
		if s.Tunnel {
			return s, errors.New("mcp: a tunnel is not inspected, so its tool calls could not be checked")
		}
		if s.Git != nil {
			return s, errors.New("mcp and git are exclusive: a scope is one protocol's")
		}
		if len(s.MCP.Tools) == 0 {
			return s, errors.New("mcp: tools: name the tools the task may call")
		}
		for _, t := range s.MCP.Tools {
			if t == "" || len(t) > 128 {
				return s, fmt.Errorf("mcp: tools: %q is not a tool name", t)
			}
		}
		for _, t := range s.MCP.Approve {
			if !s.MCP.AllowsTool(t) {
				return s, fmt.Errorf("mcp: approve: %q is not one of the tools", t)
			}
		}
	}
	return s, nil
}

// canonicalMethods returns methods upper case, in a new slice (the scopes parsed are the
// caller's, and may be parsed again at the same time).
func canonicalMethods(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, m := range in {
		m = strings.ToUpper(strings.TrimSpace(m))
		if m == "" || strings.ContainsAny(m, " \t/") {
			return nil, fmt.Errorf("method %q is not a token", m)
		}
		out = append(out, m)
	}
	return out, nil
}

// checkGlobs checks path globs: each starts with / and is a valid path.Match pattern.
func checkGlobs(globs []string) error {
	for _, p := range globs {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("path %q must start with /", p)
		}
		if _, err := path.Match(p, "/"); err != nil {
			return fmt.Errorf("path %q: %v", p, err)
		}
	}
	return nil
}

// CanonicalHost lower-cases a host name, drops a trailing dot and converts IDNs to punycode.
func CanonicalHost(h string) (string, error) {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" {
		return "", errors.New("empty host")
	}
	if !strings.HasPrefix(h, "[") && (strings.HasPrefix(h, ".") || strings.HasSuffix(h, ".") || strings.Contains(h, "..")) {
		return "", fmt.Errorf("%q has an empty label", h)
	}
	if isPlainName(h) {
		return h, nil // first: a plain name is never an address literal (see isPlainName)
	}
	if a, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		if a.Zone() != "" {
			return "", fmt.Errorf("%q names a zone: an address scoped to one of this host's links is never a destination", h)
		}
		return a.Unmap().String(), nil
	}
	// Decimal, octal, hex and short IPv4 forms ("2130706433", "0177.0.0.1", "0x7f.1") are
	// addresses to many resolvers and clients: treat them as the address they denote, so they
	// meet the IP-literal rules instead of passing as names.
	if a, ok := parseLooseIPv4(h); ok {
		return a.String(), nil
	}
	c, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", err
	}
	if c == "" || strings.HasPrefix(c, ".") || strings.HasSuffix(c, ".") || strings.Contains(c, "..") {
		return "", fmt.Errorf("%q is not a host name", h)
	}
	return c, nil
}

// isPlainName reports whether h is already a canonical ASCII host name that needs no IDNA
// processing: labels of 1 to 63 letters, digits, hyphens or underscores, not starting or ending
// with a hyphen, the last one not all digits or hex (so it cannot be an IPv4 form), and no
// punycode prefix. Names that fail this take the full path.
func isPlainName(h string) bool {
	if len(h) > 253 {
		return false
	}
	labelStart := 0
	lastNumeric := true
	for i := 0; i <= len(h); i++ {
		if i == len(h) || h[i] == '.' {
			l := h[labelStart:i]
			if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' ||
				(len(l) >= 4 && l[2] == '-' && l[3] == '-') {
				return false
			}
			lastNumeric = true
			for j := 0; j < len(l); j++ {
				c := l[j]
				if !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f') && c != 'x' {
					lastNumeric = false
				}
			}
			labelStart = i + 1
			continue
		}
		c := h[i]
		if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' && c != '_' {
			return false
		}
	}
	return !lastNumeric
}

// parseLooseIPv4 parses the inet_aton forms of an IPv4 address: one to four parts, each
// decimal, octal (leading 0) or hex (0x), the last part filling the remaining bytes.
func parseLooseIPv4(h string) (netip.Addr, bool) {
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x") || strings.HasPrefix(p, "0X"):
			base, p = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, p = 8, p[1:]
		}
		if p == "" && base != 8 {
			return netip.Addr{}, false
		}
		if p == "" {
			p = "0"
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var ip uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		ip |= v << (24 - 8*i)
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	ip |= last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// Request is a destination to decide on. Host must be canonical (see CanonicalHost).
type Request struct {
	Host   string
	Port   int
	Method string // empty for a CONNECT or DNS decision
	// Path is the request path in its wire form, exactly as it is sent upstream (see
	// CheckPath); ignored when Method is empty.
	Path string
}

// Match returns the first scope that allows r, or false. A request with an empty Method matches
// on host and port only: it asks whether any request to that destination could be allowed. A
// request path that CheckPath refuses matches no scope that lists paths.
func (set Set) Match(r Request) (Scope, bool) {
	for _, s := range set {
		if s.matchHost(r.Host) && s.matchPort(r.Port) && (r.Method == "" || s.matchMethod(r.Method) && s.matchPath(r.Path)) {
			return s, true
		}
	}
	return Scope{}, false
}

// AllowsName reports whether some scope's host pattern covers name, whatever the port: the
// resolver's question.
func (set Set) AllowsName(name string) (Scope, bool) {
	for _, s := range set {
		if s.Host != "" && s.matchHost(name) {
			return s, true
		}
	}
	return Scope{}, false
}

func (s Scope) matchHost(h string) bool {
	if s.CIDR != "" {
		a, err := netip.ParseAddr(h)
		return err == nil && s.prefix.Contains(a.Unmap())
	}
	if rest, ok := strings.CutPrefix(s.Host, "*."); ok {
		label, parent, found := strings.Cut(h, ".")
		return found && label != "" && parent == rest
	}
	return h == s.Host
}

func (s Scope) matchPort(p int) bool {
	if len(s.Ports) == 0 {
		return slices.Contains(DefaultPorts, p)
	}
	return slices.Contains(s.Ports, p)
}

func (s Scope) matchMethod(m string) bool {
	return len(s.Methods) == 0 || slices.Contains(s.Methods, m)
}

// matchPath matches p as it is, never cleaned or decoded: the path checked must be the path
// sent. A path that could be read as another one matches nothing.
func (s Scope) matchPath(p string) bool {
	if len(s.Paths) == 0 {
		return true
	}
	if CheckPath(p) != nil {
		return false
	}
	for _, g := range s.Paths {
		if globMatch(g, p) {
			return true
		}
	}
	return false
}

// globMatch matches p against a path.Match glob in which a trailing "/*" also covers deeper
// names: the glob's parent is matched against the same number of leading segments of p. Paths
// and git refs are matched by it.
func globMatch(g, p string) bool {
	if ok, _ := path.Match(g, p); ok {
		return true
	}
	base, ok := strings.CutSuffix(g, "/*")
	if !ok {
		return false
	}
	n := strings.Count(base, "/")
	segs := strings.SplitAfterN(p, "/", n+2)
	if len(segs) != n+2 || segs[n+1] == "" {
		return false
	}
	prefix := strings.TrimSuffix(strings.Join(segs[:n+1], ""), "/")
	ok, _ = path.Match(base, prefix)
	return ok
}

// String names the scope for audit records and refusals.
func (s Scope) String() string {
	target := s.Host
	if s.CIDR != "" {
		target = s.CIDR
	}
	if len(s.Ports) > 0 {
		ps := make([]string, len(s.Ports))
		for i, p := range s.Ports {
			ps[i] = fmt.Sprint(p)
		}
		target += ":" + strings.Join(ps, ",")
	}
	return target
}
