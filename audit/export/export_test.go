package export

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// get walks a decoded JSON document by keys.
func get(t *testing.T, doc map[string]any, path ...string) any {
	t.Helper()
	b, _ := json.Marshal(doc)
	var v any
	json.Unmarshal(b, &v)
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: no object at %q in %s", path, k, b)
		}
		v = m[k]
	}
	return v
}

// TestOCSFClasses: one record of each kind maps to its OCSF class, with the schema's own
// attributes where there are any and airlock's fields in unmapped.
func TestOCSFClasses(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	code := 3
	common := audit.Record{Time: at, Node: "n1", Tenant: "acme", Lease: "l-1", Task: "task-1", Sandbox: "sb", Source: "10.0.0.5", Seq: 42, Hash: "h42"}
	with := func(f func(*audit.Record)) audit.Record { r := common; f(&r); return r }
	for _, c := range []struct {
		name           string
		r              audit.Record
		class, typeUID int
		checks         map[string]any // dotted path -> value
	}{
		{"an allowed GET", with(func(r *audit.Record) {
			r.Kind, r.Decision, r.Rule, r.Method, r.Host, r.Port, r.Path, r.Status, r.Credential = audit.KindHTTP, audit.Allow, rule.Scope, "GET", "api.example.test", 443, "/v1/x", 200, "demo"
		}), ClassHTTP, 400203, map[string]any{"http_request.http_method": "GET", "http_request.url.hostname": "api.example.test",
			"http_request.url.path": "/v1/x", "http_response.code": 200.0, "action_id": 1.0, "unmapped.credential": "demo", "unmapped.lease": "l-1"}},
		{"a denied POST", with(func(r *audit.Record) {
			r.Kind, r.Decision, r.Rule, r.Method, r.Host, r.Port, r.Reason = audit.KindHTTP, audit.Deny, rule.ScopeMiss, "POST", "evil.example", 80, "no scope"
		}), ClassHTTP, 400206, map[string]any{"action_id": 2.0, "disposition_id": 2.0, "status_id": 2.0, "message": "no scope", "unmapped.rule": "scope-miss"}},
		{"a tunnel", with(func(r *audit.Record) {
			r.Kind, r.Decision, r.Method, r.Host, r.Port, r.BytesUp, r.BytesDown = audit.KindHTTP, audit.Allow, "CONNECT", "db.example", 5432, 10, 20
		}), ClassNetwork, 400101, map[string]any{"dst_endpoint.hostname": "db.example", "dst_endpoint.port": 5432.0, "traffic.bytes": 30.0}},
		{"a DNS query", with(func(r *audit.Record) {
			r.Kind, r.Decision, r.QName, r.QType, r.Answers, r.Flagged = audit.KindDNS, audit.Deny, "x.evil.example", "TXT", 0, true
		}), ClassDNS, 400301, map[string]any{"query.hostname": "x.evil.example", "query.type": "TXT", "severity_id": 4.0, "unmapped.flagged": true, "src_endpoint.ip": "10.0.0.5"}},
		{"an exec", with(func(r *audit.Record) {
			r.Kind, r.Command, r.ExitCode, r.Process = audit.KindExec, []string{"pytest", "-q"}, &code, "p-1"
		}), ClassProcess, 100701, map[string]any{"process.cmd_line": "pytest -q", "exit_code": 3.0, "process.uid": "p-1"}},
		{"a move", with(func(r *audit.Record) {
			r.Kind, r.Event, r.Decision, r.Path, r.To = audit.KindFile, "move", audit.Allow, "/workspace/a", "/workspace/b"
		}), ClassFileSystem, 100105, map[string]any{"file.path": "/workspace/a", "file_result.name": "b"}},
		{"an upload", with(func(r *audit.Record) {
			r.Kind, r.Event, r.Decision, r.Path, r.Size, r.SHA256 = audit.KindFile, "upload", audit.Allow, "/workspace/app.py", 12, "abc"
		}), ClassFileSystem, 100101, map[string]any{"file.size": 12.0, "file.name": "app.py"}},
		{"a lease event", with(func(r *audit.Record) { r.Kind, r.Event = audit.KindLease, "release" }), ClassBase, 0,
			map[string]any{"unmapped.event": "release", "unmapped.kind": "lease"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := OCSF(c.r)
			if get(t, ev, "class_uid") != float64(c.class) || get(t, ev, "type_uid") != float64(c.typeUID) {
				t.Errorf("class %v type %v, want %d %d", get(t, ev, "class_uid"), get(t, ev, "type_uid"), c.class, c.typeUID)
			}
			if get(t, ev, "time") != float64(at.UnixMilli()) || get(t, ev, "metadata", "version") != OCSFVersion ||
				get(t, ev, "metadata", "product", "name") != "airlock" || get(t, ev, "metadata", "sequence") != 42.0 {
				t.Errorf("common attributes: %v", ev)
			}
			for path, want := range c.checks {
				if got := get(t, ev, splitPath(path)...); got != want {
					t.Errorf("%s = %v (%T), want %v", path, got, got, want)
				}
			}
		})
	}
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := range p {
		if p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}

// TestECS: the same records in ECS, with airlock's fields under airlock.
func TestECS(t *testing.T) {
	r := audit.Record{Time: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Kind: audit.KindHTTP, Decision: audit.Deny, Rule: rule.ScopeMiss,
		Method: "GET", Host: "evil.example", Port: 443, Path: "/", Lease: "l-1", Source: "10.0.0.5", Reason: "no scope"}
	doc := ECS(r)
	for path, want := range map[string]any{"event.outcome": "failure", "event.reason": "no scope", "http.request.method": "GET",
		"url.domain": "evil.example", "destination.port": 443.0, "rule.name": "scope-miss", "airlock.lease": "l-1", "source.ip": "10.0.0.5",
		"@timestamp": "2026-12-01T12:00:00.000Z"} {
		if got := get(t, doc, splitPath(path)...); got != want {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	code := 0
	exec := ECS(audit.Record{Kind: audit.KindExec, Command: []string{"ls", "-l"}, ExitCode: &code})
	if get(t, exec, "process", "command_line") != "ls -l" || get(t, exec, "process", "exit_code") != 0.0 {
		t.Errorf("exec: %v", exec)
	}
	dns := ECS(audit.Record{Kind: audit.KindDNS, QName: "a.example", QType: "A"})
	if get(t, dns, "dns", "question", "name") != "a.example" {
		t.Errorf("dns: %v", dns)
	}
}
