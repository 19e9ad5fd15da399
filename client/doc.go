// Package client is the Go client of airlock's HTTP API, used by the CLI and by agent backends.
//
// It links no server: the API's requests and answers come from the leaf package api/apitype,
// audit records, approvals and explanations from packages that link no server's client, and
// TestDependencies holds its dependency list (deps.txt) to that.
package client
