package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/airlock-dev/airlock/audit"
)

// StateDir is where `airlock up` keeps its state: AIRLOCK_STATE_DIR, else
// $XDG_STATE_HOME/airlock, else ~/.local/state/airlock.
func StateDir() string {
	if d := os.Getenv("AIRLOCK_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "airlock")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "airlock")
	}
	return filepath.Join(home, ".local", "state", "airlock")
}

// ClientFile is what the CLI reads of the file `airlock up` leaves in its state dir
// (node.ClientFile, which writes more; TestClientFileReadsWhatTheNodeWrites holds the two
// together): where the API is and its key, the node and its deployment, the CA of an API over
// TLS, the audit trail and its public key, and the Redis that keeps the latest checkpoint.
type ClientFile struct {
	Addr       string `json:"addr"`
	Token      string `json:"token"`
	Node       string `json:"node"`
	Deployment string `json:"deployment"`
	CA         string `json:"ca"`
	Audit      string `json:"audit"`
	AuditKey   string `json:"audit_key"`
	RedisURL   string `json:"redis_url,omitempty"`
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

// VerifierKey reads a verifier key given as the key itself or a file holding it; empty means
// the local node's.
func VerifierKey(key string) (note.Verifier, error) {
	if key == "" {
		local, _ := ReadClientFile(StateDir())
		key = local.AuditKey
		if key == "" {
			key = filepath.Join(StateDir(), "audit-key.pub")
		}
	}
	vkey := key
	if b, err := os.ReadFile(key); err == nil {
		vkey = string(b)
	} else if !strings.Contains(key, "+") {
		return nil, fmt.Errorf("--key %s: neither a key nor a readable file (%v)", key, err)
	}
	return audit.NewVerifier(vkey)
}
