package rule

import "github.com/airlock-dev/airlock/scope"

// Explanation is what the rules decide for one request of a task, without sending it: the
// answer of the gateway's Explain, of POST /v1/explain and of airlock explain.
type Explanation struct {
	Task     string       `json:"task"`
	Method   string       `json:"method"`
	URL      string       `json:"url"`
	Decision string       `json:"decision"`
	Rule     Rule         `json:"rule"`
	Reason   string       `json:"reason"`
	Hint     string       `json:"hint,omitempty"`
	Scope    *scope.Scope `json:"scope,omitempty"`
	// Profile names the profile the deciding scope came from, if any.
	Profile    string `json:"profile,omitempty"`
	Credential string `json:"credential,omitempty"`
	// Mirror is the server the request would go to instead, when the name is mirrored.
	Mirror string `json:"mirror,omitempty"`
	// Upstream says how the destination address will be chosen at dial time.
	Upstream string `json:"upstream,omitempty"`
}
