package config

import (
	"net/netip"
	"time"

	"github.com/airlock-dev/airlock/slots"
)

// APITLS is a listener's certificate and key (PEM files): the API's, the review page's, the E2B
// listener's.
type APITLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether a certificate is configured.
func (t APITLS) Enabled() bool { return t.CertFile != "" }

// validate checks that the certificate and the key are named together; field is the
// listener's tls setting.
func (t APITLS) validate(field string, bad badFunc) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		bad(field, "cert_file and key_file go together")
	}
}

// validateListen checks a listener's address, section+".listen": ADDRESS:PORT, and beyond
// loopback only with TLS. who names the listener in the message ("the API").
func validateListen(section, listen string, tls APITLS, who string, bad badFunc) {
	if ap, err := netip.ParseAddrPort(listen); err != nil {
		bad(section+".listen", "%q is not ADDRESS:PORT", listen)
	} else if !ap.Addr().IsLoopback() && !tls.Enabled() {
		bad(section+".listen", "%s is not a loopback address; %s may listen beyond loopback only with TLS (%s.tls.cert_file and key_file)", ap.Addr(), who, section)
	}
}

// What a listener's clients may hold open, however they hold it (package slots): connections
// per address before anyone is known (Connections), each phase of a connection in time
// (Timeouts), and once a caller is known, its calls and its streams (Slots). Each is validated
// beside its type; past a bound the listener answers 429 naming the setting, with Retry-After.

// Slots bounds what a listener's callers hold at once, each call or stream a slot from its start
// to its end: on the review page the live tails and exports (review.streams) and every other
// page and form in progress (review.calls); on the API the calls held open for minutes
// (commands, process output and waits, file transfers, audit pages: api.streams) and every
// other call in progress (api.calls).
type Slots struct {
	// Max is how many the node serves at once.
	Max int `yaml:"max"`
	// PerIdentity is how many one identity holds at once, however many sessions, keys or
	// connections it uses: a reviewer key (by name), or a tenant (all its API keys together).
	// Less than Max, so no identity can hold them all.
	PerIdentity int `yaml:"per_identity"`
	// Reviewers, of Max, only reviewer keys may take: tenants hold at most Max-Reviewers
	// together, so the security team always finds one.
	Reviewers int `yaml:"reviewers"`
}

// Default slot bounds.
var (
	// DefaultReviewStreams: 64 live tails and exports at once, 4 per identity, 16 kept for
	// reviewers.
	DefaultReviewStreams = Slots{Max: 64, PerIdentity: 4, Reviewers: 16}
	// DefaultReviewCalls: 256 pages and forms in progress at once, 16 per identity, 64 kept
	// for reviewers.
	DefaultReviewCalls = Slots{Max: 256, PerIdentity: 16, Reviewers: 64}
	// DefaultAPIStreams: 1024 calls held open at once, 256 per tenant.
	DefaultAPIStreams = Slots{Max: 1024, PerIdentity: 256}
	// DefaultAPICalls: 1024 other calls in progress at once, 128 per tenant, 64 kept for
	// reviewer keys (which answer approvals).
	DefaultAPICalls = Slots{Max: 1024, PerIdentity: 128, Reviewers: 64}
)

// validate checks the bounds at field; reviewers says whether reviewer keys take these slots
// on this listener (the API's streams they do not).
func (s Slots) validate(field string, reviewers bool, bad badFunc) {
	if s.Max < 2 || s.Max > 100000 {
		bad(field+".max", "must be between 2 and 100000 (%d)", s.Max)
	}
	if s.PerIdentity < 1 || s.PerIdentity >= s.Max {
		bad(field+".per_identity", "must be at least 1 and less than max (%d), so no one identity can hold them all (%d)", s.Max, s.PerIdentity)
	}
	switch {
	case !reviewers && s.Reviewers != 0:
		bad(field+".reviewers", "must be 0: reviewer keys take none of these on this listener (%d)", s.Reviewers)
	case s.Reviewers < 0 || s.Reviewers > s.Max:
		bad(field+".reviewers", "must be between 0 and max (%d) (%d)", s.Max, s.Reviewers)
	}
}

// Limits are the bounds as package slots takes them.
func (s Slots) Limits() slots.Limits {
	return slots.Limits{Max: s.Max, PerIdentity: s.PerIdentity, Reserved: s.Reviewers}
}

// Connections bounds the connections a listener holds, each counted from accept to close under
// the address it comes from (an IPv6 address by its /64), since nothing on it is authenticated
// yet. Behind a proxy or a NAT every client is one address, and in a deployment of several
// nodes the calls a node forwards come from its address: per_address must cover them.
type Connections struct {
	// Max is how many the listener holds at once; with the refusals it answers (at most
	// PerAddress at once) it never holds more, so this bounds the file descriptors the
	// listener takes from the node's process, which also runs the gateway and the resolver.
	Max int `yaml:"max"`
	// PerAddress is how many one address holds. Less than Max, so no address holds them all.
	PerAddress int `yaml:"per_address"`
}

// Default connection bounds.
var (
	DefaultAPIConnections    = Connections{Max: 4096, PerAddress: 512}
	DefaultReviewConnections = Connections{Max: 1024, PerAddress: 256}
)

func (c Connections) validate(field string, bad badFunc) {
	if c.Max < 2 || c.Max > 1000000 {
		bad(field+".max", "must be between 2 and 1000000 (%d)", c.Max)
	}
	if c.PerAddress < 1 || c.PerAddress >= c.Max {
		bad(field+".per_address", "must be at least 1 and less than max (%d), so no one address can hold them all (%d)", c.Max, c.PerAddress)
	}
}

// Limits are the bounds as package slots takes them.
func (c Connections) Limits() slots.Conns { return slots.Conns{Max: c.Max, PerAddress: c.PerAddress} }

// Timeouts bound how long a listener's connection goes without progress. None may be zero,
// which would let a client hold a connection for as long as it likes.
type Timeouts struct {
	// Header: a TLS handshake, and a request's line and headers from their first byte.
	Header time.Duration `yaml:"header"`
	// Body: the whole body of a call that is not an upload (a JSON body, a form), from the
	// call's start; past it the call is answered 408 naming this setting.
	Body time.Duration `yaml:"body"`
	// Stall: an upload whose next byte does not come, or an answer (a download, command
	// output, a page) whose client takes no byte, for this long is cut off. A stream with
	// nothing to send is not stalled, and a terminal's input may wait without end.
	Stall time.Duration `yaml:"stall"`
	// Idle: a kept-alive connection waiting for its next request. Longer than the 90 s a Go
	// client keeps an idle connection, so it is the client that closes first.
	Idle time.Duration `yaml:"idle"`
}

// DefaultTimeouts are every listener's: 10 s for the headers, 30 s for a call's body, 1 min
// for a stall, 2 min idle.
var DefaultTimeouts = Timeouts{Header: 10 * time.Second, Body: 30 * time.Second, Stall: time.Minute, Idle: 2 * time.Minute}

func (t Timeouts) validate(field string, bad badFunc) {
	for _, d := range []struct {
		name     string
		v, upper time.Duration
	}{{"header", t.Header, 5 * time.Minute}, {"body", t.Body, time.Hour}, {"stall", t.Stall, time.Hour}, {"idle", t.Idle, time.Hour}} {
		if d.v < time.Second || d.v > d.upper {
			bad(field+"."+d.name, "must be between 1s and %s (%s)", d.upper, d.v)
		}
	}
}

// Slots are the timeouts as package slots takes them.
func (t Timeouts) Slots() slots.Timeouts {
	return slots.Timeouts{Header: t.Header, Body: t.Body, Stall: t.Stall, Idle: t.Idle}
}
