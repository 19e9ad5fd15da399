// Package exfil spots data leaving a sandbox in the names it looks up. Under a wildcard scope
// the task chooses the names, and a lookup of "<encoded data>.files.example" carries the data to
// whoever serves that zone, whether the sandbox's resolver or the gateway makes the lookup. One
// Guard per node holds the policy (label and name length, entropy, distinct names per lease and
// apex in a sliding window) for the resolver and the gateway alike, so neither is a way around
// the other.
package exfil
