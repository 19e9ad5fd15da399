package config

// API is the pool API listener.
type API struct {
	// Listen is ADDRESS:PORT; beyond loopback only with TLS.
	Listen string `yaml:"listen"`
	// TLS serves the API over TLS with this certificate and key (PEM files).
	TLS APITLS `yaml:"tls"`
	// Advertise is the URL other nodes reach this API at (for example
	// https://node-2.internal:7070); empty derives it from listen.
	Advertise string `yaml:"advertise"`
	// NodeSecretFile holds the deployment's node secret, which signs the calls nodes forward
	// to each other; every node must have the same one. Empty: the nodes share one through
	// Redis (made by the first node to start).
	NodeSecretFile string `yaml:"node_secret_file"`
	// PeerCAFile holds extra roots (PEM) for verifying other nodes' API certificates.
	PeerCAFile string `yaml:"peer_ca_file"`
	// Keys are the API keys, stored as the hex SHA-256 of the key, each belonging to a tenant.
	Keys []APIKey `yaml:"keys"`
	// RatePerKey and BurstPerKey limit requests per API key (429 past them); 0 disables.
	RatePerKey  int `yaml:"rate_per_key"`
	BurstPerKey int `yaml:"burst_per_key"`
	// MaxPortsPerLease bounds the ports one lease may expose with `airlock port` at once; each
	// is a listener on the node. 0 means 8.
	MaxPortsPerLease int `yaml:"max_ports_per_lease"`
	// Streams bounds the calls held open (commands, process output and waits, file transfers,
	// audit pages), per tenant and for the node.
	Streams Slots `yaml:"streams"`
	// Calls bounds every other call in progress, per tenant (or reviewer key, on the approval
	// endpoints) and for the node, with a share kept for reviewer keys.
	Calls Slots `yaml:"calls"`
	// Connections bounds the API's connections per address and in all, before any key is
	// known.
	Connections Connections `yaml:"connections"`
	// Timeouts bound how long an API connection goes without progress.
	Timeouts Timeouts `yaml:"timeouts"`
}

// APIKey is one API key, by its hash.
type APIKey struct {
	Tenant string `yaml:"tenant"`
	SHA256 string `yaml:"sha256"`
}
