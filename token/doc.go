// Package token verifies task tokens (JWTs naming a task and its egress scopes) and, for the
// all-in-one dev node only, mints them.
package token
