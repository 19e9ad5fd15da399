package node

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// ClientFile is what `airlock up` leaves in the state dir for the CLI.
type ClientFile struct {
	Addr  string `json:"addr"`
	Token string `json:"token"`
	Ready
	VaultAddr  string `json:"vault_addr,omitempty"`
	VaultToken string `json:"vault_token,omitempty"` // dev server root token; dev only
	// RedisURL is where the node keeps its state, and its latest audit checkpoint (under the
	// deployment's keys), which `airlock audit verify` compares the trail's tail with.
	RedisURL string `json:"redis_url,omitempty"`
}

// WriteClientFile writes f to dir/client.json, readable by its owner only.
func WriteClientFile(dir string, f ClientFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "client.json"), b, 0o600)
}

// ReadClientFile reads dir/client.json.
func ReadClientFile(dir string) (ClientFile, error) {
	var f ClientFile
	b, err := os.ReadFile(filepath.Join(dir, "client.json"))
	if err != nil {
		return f, err
	}
	return f, json.Unmarshal(b, &f)
}
