// Package export maps audit records to the schemas SIEMs take: OCSF 1.3 (HTTP Activity 4002,
// DNS Activity 4003, Network Activity 4001 for tunnels, Process Activity 1007 for exec, File
// System Activity 1001 for file operations, Base Event 0 for lease events) and Elastic Common
// Schema. What no attribute of a class carries goes in OCSF's `unmapped` and in ECS under
// `airlock.*`, so nothing of the record is lost. A record does not say whether a request went
// in clear or under TLS, so no URL string is made up from its parts.
package export

import (
	"net"
	"strings"

	"github.com/airlock-dev/airlock/audit"
)

// OCSFVersion is the OCSF schema version the records claim.
const OCSFVersion = "1.3.0"

// OCSF class and category ids.
const (
	ClassBase       = 0
	ClassFileSystem = 1001
	ClassProcess    = 1007
	ClassNetwork    = 4001
	ClassHTTP       = 4002
	ClassDNS        = 4003
)

// httpActivity is OCSF HTTP Activity's activity_id per method; 99 is Other.
var httpActivity = map[string]int{"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8}

// fileActivity is File System Activity's activity_id per airlock file event.
var fileActivity = map[string]int{
	"upload": 1, "upload-tar": 1, "mkdir": 1, // Create
	"download": 2, "download-tar": 2, "list": 2, // Read
	"remove": 4, // Delete
	"move":   5, // Rename
	"stat":   7, // Get Attributes
	// What the lease left in its workspace, read when it ended.
	"workspace-created": 1, "workspace-modified": 3, "workspace-deleted": 4,
}

// OCSF returns r as an OCSF event.
func OCSF(r audit.Record) map[string]any {
	class, category, activity := ClassBase, 0, 0
	ev := map[string]any{}
	unmapped := map[string]any{}
	switch {
	case r.Kind == audit.KindHTTP && r.Method == "CONNECT":
		class, category, activity = ClassNetwork, 4, 1 // Open
		ev["dst_endpoint"] = endpoint(r.Host, r.Port)
		ev["traffic"] = traffic(r)
	case r.Kind == audit.KindHTTP:
		class, category = ClassHTTP, 4
		activity = httpActivity[r.Method]
		if activity == 0 {
			activity = 99
		}
		ev["http_request"] = map[string]any{"http_method": r.Method,
			"url": map[string]any{"hostname": r.Host, "port": r.Port, "path": r.Path}}
		if r.Status != 0 {
			ev["http_response"] = map[string]any{"code": r.Status}
		}
		ev["dst_endpoint"] = endpoint(r.Host, r.Port)
		ev["traffic"] = traffic(r)
	case r.Kind == audit.KindDNS:
		class, category, activity = ClassDNS, 4, 1 // Query
		ev["query"] = map[string]any{"hostname": r.QName, "type": r.QType}
		unmapped["answers"] = r.Answers
	case r.Kind == audit.KindExec:
		class, category, activity = ClassProcess, 1, 1 // Launch
		p := map[string]any{"cmd_line": strings.Join(r.Command, " ")}
		if r.Process != "" {
			p["uid"] = r.Process
		}
		ev["process"] = p
		if r.ExitCode != nil {
			ev["exit_code"] = *r.ExitCode
		}
	case r.Kind == audit.KindFile:
		class, category = ClassFileSystem, 1
		activity = fileActivity[string(r.Event)]
		if activity == 0 {
			activity = 99
		}
		f := map[string]any{"path": r.Path, "name": baseName(r.Path), "size": r.Size}
		if r.SHA256 != "" {
			f["hashes"] = []map[string]any{{"algorithm_id": 3, "algorithm": "SHA-256", "value": r.SHA256}}
		}
		ev["file"] = f
		if r.To != "" {
			ev["file_result"] = map[string]any{"path": r.To, "name": baseName(r.To)}
		}
	}
	if r.Source != "" {
		ev["src_endpoint"] = map[string]any{"ip": r.Source}
	}
	ev["class_uid"], ev["category_uid"], ev["activity_id"] = class, category, activity
	ev["type_uid"] = class*100 + activity
	ev["time"] = r.Time.UnixMilli()
	ev["severity_id"] = 1                                            // Informational
	ev["status_id"], ev["action_id"], ev["disposition_id"] = 1, 1, 1 // Success, Allowed, Allowed
	if r.Decision == audit.Deny {
		ev["severity_id"], ev["status_id"], ev["action_id"], ev["disposition_id"] = 3, 2, 2, 2 // Medium, Failure, Denied, Blocked
	}
	if r.Flagged {
		ev["severity_id"] = 4 // High: a reviewer should look
	}
	if r.Reason != "" {
		ev["message"] = r.Reason
	}
	if r.DurationMS != 0 {
		ev["duration"] = int64(r.DurationMS)
	}
	ev["metadata"] = map[string]any{"version": OCSFVersion, "uid": r.Hash, "sequence": r.Seq,
		"product": map[string]any{"name": "airlock", "vendor_name": "airlock"}}
	for k, v := range airlockFields(r) {
		unmapped[k] = v
	}
	ev["unmapped"] = unmapped
	return ev
}

// ECS returns r as an Elastic Common Schema document.
func ECS(r audit.Record) map[string]any {
	outcome := "success"
	if r.Decision == audit.Deny {
		outcome = "failure"
	}
	event := map[string]any{"kind": "event", "outcome": outcome, "dataset": "airlock." + string(r.Kind)}
	if r.Decision != "" {
		event["action"] = string(r.Decision)
	}
	if r.Event != "" {
		event["action"] = r.Event
	}
	if r.Reason != "" {
		event["reason"] = r.Reason
	}
	if r.DurationMS != 0 {
		event["duration"] = int64(r.DurationMS * 1e6) // nanoseconds
	}
	doc := map[string]any{"@timestamp": r.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"), "ecs": map[string]any{"version": "8.11.0"},
		"observer": map[string]any{"product": "airlock", "type": "proxy", "name": r.Node}}
	switch r.Kind {
	case audit.KindHTTP:
		event["category"] = []string{"network", "web"}
		doc["destination"] = map[string]any{"domain": r.Host, "port": r.Port}
		if r.Method != "CONNECT" {
			doc["url"] = map[string]any{"domain": r.Host, "port": r.Port, "path": r.Path}
			h := map[string]any{"request": map[string]any{"method": r.Method}}
			if r.Status != 0 {
				h["response"] = map[string]any{"status_code": r.Status}
			}
			doc["http"] = h
		}
		doc["source"] = map[string]any{"ip": r.Source, "bytes": r.BytesUp}
		doc["network"] = map[string]any{"bytes": r.BytesUp + r.BytesDown}
	case audit.KindDNS:
		event["category"] = []string{"network"}
		doc["dns"] = map[string]any{"type": "query", "question": map[string]any{"name": r.QName, "type": r.QType}}
		if r.Source != "" {
			doc["source"] = map[string]any{"ip": r.Source}
		}
	case audit.KindExec:
		event["category"] = []string{"process"}
		p := map[string]any{"command_line": strings.Join(r.Command, " "), "args": r.Command}
		if r.ExitCode != nil {
			p["exit_code"] = *r.ExitCode
		}
		doc["process"] = p
	case audit.KindFile:
		event["category"] = []string{"file"}
		f := map[string]any{"path": r.Path, "name": baseName(r.Path), "size": r.Size}
		if r.SHA256 != "" {
			f["hash"] = map[string]any{"sha256": r.SHA256}
		}
		doc["file"] = f
	default:
		event["category"] = []string{"session"}
	}
	if r.Rule != "" {
		doc["rule"] = map[string]any{"name": r.Rule.String()}
	}
	doc["event"] = event
	doc["airlock"] = airlockFields(r)
	return doc
}

// airlockFields are the record's fields no schema attribute carries: who (tenant, task, lease,
// sandbox, node), under which rule, which credential the gateway added (its name), where a
// mirror or redirect sent it, and the chain position.
func airlockFields(r audit.Record) map[string]any {
	out := map[string]any{"kind": string(r.Kind), "seq": r.Seq}
	for k, v := range map[string]string{"tenant": r.Tenant, "task": r.Task, "lease": r.Lease, "sandbox": r.Sandbox,
		"node": r.Node, "rule": r.Rule.String(), "decision": string(r.Decision), "credential": r.Credential,
		"upstream": r.Upstream, "dest": r.Dest, "mirror": r.Mirror, "event": string(r.Event), "process": r.Process,
		"to": r.To, "prev": r.Prev, "hash": r.Hash, "template": r.Template, "runtime": r.Runtime, "segment": r.Segment,
		"head": r.Head, "note": r.Note, "reviewer": r.Reviewer} {
		if v != "" {
			out[k] = v
		}
	}
	for k, v := range map[string]*audit.Stream{"stdin": r.Stdin, "stdout": r.Stdout, "stderr": r.Stderr} {
		if v != nil {
			out[k] = v
		}
	}
	if len(r.Scopes) > 0 {
		out["scopes"] = r.Scopes
	}
	if r.Through != 0 {
		out["through"] = r.Through
	}
	if r.Flagged {
		out["flagged"] = true
	}
	if len(r.Raw) > 0 {
		out["raw"] = r.Raw
	}
	return out
}

func endpoint(host string, port int) map[string]any {
	e := map[string]any{"hostname": host}
	if net.ParseIP(host) != nil {
		e = map[string]any{"ip": host}
	}
	if port != 0 {
		e["port"] = port
	}
	return e
}

func traffic(r audit.Record) map[string]any {
	return map[string]any{"bytes_out": r.BytesUp, "bytes_in": r.BytesDown, "bytes": r.BytesUp + r.BytesDown}
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
