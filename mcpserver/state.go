package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api/apitype"
)

// The state that travels: snapshots of a sandbox's workspace, sandboxes from them
// (sandbox_create's from), and pause and resume.

// SnapshotIn is sandbox_snapshot's input.
type SnapshotIn struct {
	Lease string   `json:"lease" jsonschema:"the sandbox's lease id"`
	Name  string   `json:"name,omitempty" jsonschema:"a name to find it by; sandbox_create's from takes it as it takes the id"`
	Paths []string `json:"paths,omitempty" jsonschema:"writable paths besides the workspace that the template declares for snapshots, to keep too (default: the workspace alone)"`
}

// SnapshotRefIn names a snapshot.
type SnapshotRefIn struct {
	Snapshot string `json:"snapshot" jsonschema:"the snapshot's id (sha256:...) or name"`
}

// SnapshotListOut is snapshot_list's result.
type SnapshotListOut struct {
	Snapshots []apitype.SnapshotView `json:"snapshots" jsonschema:"your snapshots, newest first"`
}

// PauseIn is sandbox_pause's input.
type PauseIn struct {
	Lease  string `json:"lease" jsonschema:"the sandbox's lease id"`
	Memory bool   `json:"memory,omitempty" jsonschema:"keep running processes too, where the node's runtime can; the answer's kept says what was kept"`
}

// PauseOut is sandbox_pause's result.
type PauseOut struct {
	Lease string       `json:"lease"`
	Task  string       `json:"task" jsonschema:"the task a token for sandbox_resume must be for"`
	Kept  apitype.Kept `json:"kept" jsonschema:"files (the workspace; running processes are gone) or memory+files"`
	Why   string       `json:"why,omitempty" jsonschema:"why memory was not kept, when it was asked for"`
	Until time.Time    `json:"until" jsonschema:"when the paused sandbox is released unless resumed"`
	// TookMS is how long the pause took.
	TookMS int64 `json:"took_ms"`
	// Resume says how to bring it back.
	Resume string `json:"resume"`
}

// ResumeIn is sandbox_resume's input.
type ResumeIn struct {
	Lease string `json:"lease" jsonschema:"the paused sandbox's lease id"`
	Token string `json:"token" jsonschema:"a task token (JWT) from your issuer for the paused sandbox's task (sandbox_pause's task): a paused sandbox keeps none, and the one it had was revoked"`
	TTL   string `json:"ttl,omitempty" jsonschema:"how long it lives from now, for example 30m (default: the template's)"`
	Keep  bool   `json:"keep,omitempty" jsonschema:"keep the sandbox when this MCP session ends"`
}

func (s *Server) addStateTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_snapshot", Description: "Snapshot a sandbox's workspace while it runs (no credential is ever in it); sandbox_create with from starts new sandboxes from it, as many as you like."}, s.snapshot)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "snapshot_list", Description: "List your snapshots, newest first: id, name, template, size, files, when and from which sandbox.", Annotations: ro}, s.snapshots)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "snapshot_delete", Description: "Delete a snapshot; sandboxes started from it keep what they restored."}, s.deleteSnapshot)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_pause", Description: "Pause a sandbox: its compute and network access are released and its files kept until sandbox_resume, which needs a task token for the same task. Says what was kept."}, s.pause)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_resume", Description: "Resume a paused sandbox in a new container with what its pause kept, bound to a task token for its task."}, s.resume)
}

func (s *Server) snapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotIn) (*mcp.CallToolResult, apitype.SnapshotView, error) {
	v, err := s.sessionOf(req).c.Snapshot(ctx, in.Lease, in.Name, in.Paths)
	if err != nil {
		return nil, apitype.SnapshotView{}, agentError(err)
	}
	return nil, v, nil
}

func (s *Server) snapshots(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, SnapshotListOut, error) {
	ss, err := s.sessionOf(req).c.Snapshots(ctx)
	if err != nil {
		return nil, SnapshotListOut{}, agentError(err)
	}
	if ss == nil {
		ss = []apitype.SnapshotView{}
	}
	return nil, SnapshotListOut{Snapshots: ss}, nil
}

func (s *Server) deleteSnapshot(ctx context.Context, req *mcp.CallToolRequest, in SnapshotRefIn) (*mcp.CallToolResult, Done, error) {
	if in.Snapshot == "" {
		return nil, Done{}, errors.New("snapshot is required: an id or a name from snapshot_list")
	}
	if err := s.sessionOf(req).c.DeleteSnapshot(ctx, in.Snapshot); err != nil {
		return nil, Done{}, agentError(err)
	}
	return nil, Done{OK: true, Message: "deleted snapshot " + in.Snapshot}, nil
}

func (s *Server) pause(ctx context.Context, req *mcp.CallToolRequest, in PauseIn) (*mcp.CallToolResult, PauseOut, error) {
	st := s.sessionOf(req)
	p, err := st.c.Pause(ctx, in.Lease, in.Memory)
	if err != nil {
		return nil, PauseOut{}, agentError(err)
	}
	// A paused sandbox is kept when the session ends: pausing asked for its state to outlive
	// the container, and a release would delete it. sandbox_release deletes it.
	st.mu.Lock()
	delete(st.leases, in.Lease)
	st.mu.Unlock()
	return nil, PauseOut{Lease: p.Lease, Task: p.Task, Kept: p.Kept, Why: p.Why, Until: p.Until, TookMS: p.TookMS,
		Resume: fmt.Sprintf("sandbox_resume with a task token for task %s before %s; sandbox_release deletes what was kept", p.Task, p.Until.UTC().Format(time.RFC3339))}, nil
}

func (s *Server) resume(ctx context.Context, req *mcp.CallToolRequest, in ResumeIn) (*mcp.CallToolResult, SandboxOut, error) {
	if in.Token == "" {
		return nil, SandboxOut{}, errors.New("token is required: a task token for the paused sandbox's task (a paused sandbox keeps none)")
	}
	ttl, err := parseTTL(in.TTL)
	if err != nil {
		return nil, SandboxOut{}, err
	}
	st := s.sessionOf(req)
	l, err := st.c.Resume(ctx, in.Lease, in.Token, ttl)
	if err != nil {
		return nil, SandboxOut{}, agentError(err)
	}
	st.mu.Lock()
	st.leases[l.ID] = in.Keep
	st.mu.Unlock()
	return nil, sandboxOut(l), nil
}

// parseTTL reads a ttl argument: "" is the template's default.
func parseTTL(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("ttl %q is not a duration above zero, such as 30m", v)
	}
	return d, nil
}
