// Package client is the Go client of airlock's HTTP API, used by the CLI and by agent backends.
package client
