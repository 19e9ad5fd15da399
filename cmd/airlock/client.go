package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool/client"
)

// stateDir is where `airlock up` keeps its state: AIRLOCK_STATE_DIR, else
// $XDG_STATE_HOME/airlock, else ~/.local/state/airlock.
func stateDir() string {
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

// newClient finds the API: AIRLOCK_ADDR and AIRLOCK_TOKEN, else the local dev node's client file.
func newClient() (*client.Client, error) {
	addr, tok := os.Getenv("AIRLOCK_ADDR"), os.Getenv("AIRLOCK_TOKEN")
	if addr != "" {
		if tok == "" {
			return nil, errors.New("AIRLOCK_ADDR is set but AIRLOCK_TOKEN is not")
		}
		return &client.Client{Addr: addr, Token: tok}, nil
	}
	f, err := node.ReadClientFile(stateDir())
	if err != nil {
		return nil, fmt.Errorf("no airlock node found: set AIRLOCK_ADDR and AIRLOCK_TOKEN, or start one with 'airlock up' (%v)", err)
	}
	return &client.Client{Addr: f.Addr, Token: f.Token}, nil
}
