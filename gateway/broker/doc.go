// Package broker holds the operator's credential catalog and injects credentials into requests
// the gateway allows. Where the values come from is behind the Broker interface; package
// broker/vault fetches them from HashiCorp Vault.
package broker
