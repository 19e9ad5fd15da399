package scope

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ParseAllow reads the command line's short form, "HOST[:PORT][=CREDENTIAL]", into a scope.
func ParseAllow(spec string) (Scope, error) {
	var s Scope
	hostport, cred, _ := strings.Cut(strings.TrimSpace(spec), "=")
	s.Credential = cred
	host := hostport
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		port, err := strconv.Atoi(p)
		if err != nil {
			return s, fmt.Errorf("%w: %q: port %q is not a number", ErrInvalid, spec, p)
		}
		host, s.Ports = h, []int{port}
	}
	s.Host = host
	set, err := Parse([]Scope{s})
	if err != nil {
		return s, fmt.Errorf("allow %q: %w", spec, err)
	}
	return set[0], nil
}
