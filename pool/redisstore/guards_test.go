package redisstore

import "github.com/airlock-dev/airlock/gateway/broker/vault"

// Journal is the Vault broker's journal of what it minted (vault.Journal). The guard is here,
// in a test, and not beside the type, so that the store does not link Vault's client for it:
// the node, which joins the two, is the only program that needs both.
var _ vault.Journal = (*Journal)(nil)
