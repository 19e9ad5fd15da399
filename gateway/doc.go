// Package gateway is the egress proxy every sandbox must use: it knows each sandbox by its
// address, allows only what the task's scopes allow, intercepts TLS with the deployment CA,
// injects the credentials the catalog lets through, dials only vetted addresses, and records
// every decision.
package gateway
