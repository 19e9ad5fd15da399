package config

import "github.com/airlock-dev/airlock/slots"

// Streams bounds the long-lived streams a listener serves: the review page's live tails and
// exports, the API's commands, process output and waits, file transfers and audit pages. Each
// holds a slot from start to end (package slots); past a bound the listener answers 429 naming
// it, with Retry-After.
type Streams struct {
	// Max is how many the node serves at once.
	Max int `yaml:"max"`
	// PerIdentity is how many one identity holds at once, however many sessions or keys it
	// uses: on the review page a reviewer key (by name) or a tenant (all its API keys
	// together), on the API a tenant. Less than Max, so no identity can hold them all.
	PerIdentity int `yaml:"per_identity"`
	// Reviewers, of Max, only reviewer keys may take (review page only): tenants' sessions
	// hold at most Max-Reviewers together, so the security team always finds a live tail.
	Reviewers int `yaml:"reviewers"`
}

// Default stream bounds.
var (
	// DefaultReviewStreams: 64 at once, 4 per identity, 16 kept for reviewers.
	DefaultReviewStreams = Streams{Max: 64, PerIdentity: 4, Reviewers: 16}
	// DefaultAPIStreams: 1024 at once, 256 per tenant.
	DefaultAPIStreams = Streams{Max: 1024, PerIdentity: 256}
)

// validate checks the bounds at field; reviewers says whether the listener serves reviewer
// keys streams (the review page does, the API does not).
func (s Streams) validate(field string, reviewers bool, bad func(field, format string, args ...any)) {
	if s.Max < 2 || s.Max > 100000 {
		bad(field+".max", "must be between 2 and 100000 (%d)", s.Max)
	}
	if s.PerIdentity < 1 || s.PerIdentity >= s.Max {
		bad(field+".per_identity", "must be at least 1 and less than max (%d), so no one identity can hold every stream (%d)", s.Max, s.PerIdentity)
	}
	switch {
	case !reviewers && s.Reviewers != 0:
		bad(field+".reviewers", "must be 0: this listener serves reviewer keys no stream (%d)", s.Reviewers)
	case s.Reviewers < 0 || s.Reviewers > s.Max:
		bad(field+".reviewers", "must be between 0 and max (%d) (%d)", s.Max, s.Reviewers)
	}
}

// Limits are the bounds as package slots takes them.
func (s Streams) Limits() slots.Limits {
	return slots.Limits{Max: s.Max, PerIdentity: s.PerIdentity, Reserved: s.Reviewers}
}
