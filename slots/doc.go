// Package slots bounds the long-lived streams a node serves (live tails, exports, command output,
// long polls): so many at once, so many per identity, and a share that only reviewers may take, so
// no identity can hold every slot and none can starve the security team's view.
package slots
