// Package rule is the fixed vocabulary of the rules that decide what a sandbox may do: the rule
// of every audit record, the rule label of every metric, the X-Airlock-Rule header of every
// refusal. The gateway, the resolver and the pool decide under the same names, so a reviewer
// filtering the trail by rule sees the HTTP and the DNS side of one thing together.
package rule

// Rule names one rule. Its string is fixed (it is a metric label and a filter in saved
// queries); a reason in words goes beside it, never in it.
type Rule string

func (r Rule) String() string { return string(r) }

// The rules.
const (
	Scope               Rule = "scope"                  // allowed by a task scope
	NoLease             Rule = "no-lease"               // the source holds no live lease (nor a valid token)
	StoreDown           Rule = "lease-store-down"       // the lease store cannot be asked
	ScopeMiss           Rule = "scope-miss"             // no scope covers the destination
	HostMismatch        Rule = "host-mismatch"          // CONNECT host, SNI and Host disagree
	BadRequest          Rule = "bad-request"            // malformed or ambiguous request or message; a file transfer refused
	PrivateAddress      Rule = "private-address"        // the destination resolves to a non-public address
	CredentialDenied    Rule = "credential-denied"      // the catalog forbids the credential here
	CredentialDown      Rule = "credential-unavailable" // the credential's source cannot give it now
	AuditDown           Rule = "audit-unavailable"      // the decision could not be recorded
	UpstreamFailed      Rule = "upstream-failed"        // the upstream (or upstream resolver) failed
	Budget              Rule = "budget"                 // the lease spent its request or byte budget
	BodyTooLarge        Rule = "body-too-large"         // a signed body over its cap
	AmbiguousPath       Rule = "ambiguous-path"         // a path servers would read as another one
	CleartextCredential Rule = "cleartext-credential"   // a credential would travel without TLS
	Unscrubbable        Rule = "unscrubbable"           // a response could not be checked for a credential
	Tunnel              Rule = "tunnel"                 // a looked-up name looks like data leaving
	QType               Rule = "qtype"                  // a DNS query type not answered for sandboxes
	RateLimit           Rule = "rate-limit"             // too many queries from one sandbox
	Git                 Rule = "git"                    // a git request outside the scope's repositories or refs
	MCP                 Rule = "mcp"                    // an MCP tool call the scope does not list, or a message that cannot be read
	ApprovalPending     Rule = "approval-pending"       // the request waits for a reviewer (not a denial: retry)
	ApprovalDenied      Rule = "approval-denied"        // a reviewer denied the request
)

// All lists every rule.
var All = []Rule{Scope, NoLease, StoreDown, ScopeMiss, HostMismatch, BadRequest, PrivateAddress, CredentialDenied,
	CredentialDown, AuditDown, UpstreamFailed, Budget, BodyTooLarge, AmbiguousPath, CleartextCredential,
	Unscrubbable, Tunnel, QType, RateLimit, Git, MCP, ApprovalPending, ApprovalDenied}

// Known reports whether r is one of All.
func (r Rule) Known() bool {
	for _, k := range All {
		if k == r {
			return true
		}
	}
	return false
}
