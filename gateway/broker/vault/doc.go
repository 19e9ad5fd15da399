// Package vault fetches credential values from HashiCorp Vault for the gateway's broker.
package vault
