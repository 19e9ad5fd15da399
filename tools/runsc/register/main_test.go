package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRegisterKeepsTheRestAndIsIdempotent: the engine's other settings survive, a second run
// changes nothing, and a changed platform is written.
func TestRegisterKeepsTheRestAndIsIdempotent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "daemon.json")
	os.WriteFile(file, []byte(`{"log-driver": "json-file", "runtimes": {"other": {"path": "/usr/bin/other"}}}`), 0o644)
	if changed, err := register(file, "runsc", "/opt/runsc", []string{"--platform=systrap"}); err != nil || !changed {
		t.Fatalf("first: %v %v", changed, err)
	}
	if changed, err := register(file, "runsc", "/opt/runsc", []string{"--platform=systrap"}); err != nil || changed {
		t.Fatalf("second: %v %v", changed, err)
	}
	var conf map[string]any
	b, _ := os.ReadFile(file)
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	rt := conf["runtimes"].(map[string]any)
	if conf["log-driver"] != "json-file" || rt["other"] == nil || rt["runsc"].(map[string]any)["path"] != "/opt/runsc" {
		t.Fatalf("daemon.json is now %s", b)
	}
	if changed, _ := register(file, "runsc", "/opt/runsc", []string{"--platform=ptrace"}); !changed {
		t.Fatal("a new platform was not written")
	}
	if _, err := register(filepath.Join(t.TempDir(), "new", "daemon.json"), "runsc", "/opt/runsc", nil); err != nil {
		t.Fatalf("a missing file: %v", err)
	}
	os.WriteFile(file, []byte("{not json"), 0o644)
	if _, err := register(file, "runsc", "/opt/runsc", nil); err == nil {
		t.Fatal("a file that is not JSON was overwritten")
	}
}
