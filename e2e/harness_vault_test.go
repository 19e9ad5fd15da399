package e2e

import (
	"context"
	"fmt"
	"testing"

	vaultapi "github.com/hashicorp/vault/api"
)

// This file is a node's dev Vault, read with its root token.

// vault is a client of the node's dev Vault with its root token.
func (n *nodeProc) vault() (*vaultapi.Client, error) {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = n.client.VaultAddr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.SetToken(n.client.VaultToken)
	return c, nil
}

func (n *nodeProc) vaultClient(t *testing.T) *vaultapi.Client {
	t.Helper()
	c, err := n.vault()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// demoValue is the value of the demo credential in the node's Vault.
func (n *nodeProc) demoValue() (string, error) {
	c, err := n.vault()
	if err != nil {
		return "", err
	}
	s, err := c.KVv2("secret").Get(context.Background(), "airlock/demo")
	if err != nil {
		return "", fmt.Errorf("reading the demo secret from the node's Vault: %w", err)
	}
	v, _ := s.Data["token"].(string)
	if len(v) < 16 {
		return "", fmt.Errorf("demo secret %q looks wrong", v)
	}
	return v, nil
}

func (n *nodeProc) demoSecret(t *testing.T) string {
	t.Helper()
	v, err := n.demoValue()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
