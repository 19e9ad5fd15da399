// Package dnsfilter answers DNS queries from sandboxes, refusing names outside the task's scopes,
// never handing out private addresses for public names, and recording every query.
package dnsfilter
