package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
)

// The state that travels: snapshots of a lease's workspace, leases from them (Lease with
// LeaseRequest.From), and pause and resume. Errors are *Error, with the API's codes: among them
// "no_such_snapshot" (404), "too_large" (413, the message holds the numbers), "image_gone"
// (409), "snapshot_corrupt" (422), "store_down" (503) and "no_snapshots" (501, a node that
// keeps none).

// Snapshot captures the lease's workspace, and the template's declared writable paths named in
// paths (none: the workspace alone), while the sandbox runs; name is optional. The answer's
// TookMS says how long it took.
func (c *Client) Snapshot(ctx context.Context, lease, name string, paths []string) (apitype.SnapshotView, error) {
	var v apitype.SnapshotView
	_, err := c.do(ctx, http.MethodPost, leasePath(lease, "snapshots"), apitype.SnapshotRequest{Name: name, Paths: paths}, &v)
	return v, err
}

// Snapshots lists the tenant's snapshots, newest first.
func (c *Client) Snapshots(ctx context.Context) ([]apitype.SnapshotView, error) {
	var v []apitype.SnapshotView
	_, err := c.do(ctx, http.MethodGet, "/v1/snapshots", nil, &v)
	return v, err
}

// SnapshotInfo describes one of the tenant's snapshots; ref is its ID ("sha256:...") or name.
func (c *Client) SnapshotInfo(ctx context.Context, ref string) (apitype.SnapshotView, error) {
	var v apitype.SnapshotView
	_, err := c.do(ctx, http.MethodGet, snapshotPath(ref), nil, &v)
	return v, err
}

// DeleteSnapshot deletes one of the tenant's snapshots by ID or name. Leases already started
// from it keep what they restored.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	resp, err := c.do(ctx, http.MethodDelete, snapshotPath(ref), nil, nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// Pause releases the lease's sandbox and binding and keeps its state: the files always, and
// with memory its running processes where the runtime can checkpoint them. The answer's Kept
// says which was kept, and Why why memory was not when it was asked for. Every credential
// minted for the lease is revoked; a resume needs a new task token.
func (c *Client) Pause(ctx context.Context, lease string, memory bool) (apitype.PauseView, error) {
	return c.PauseWith(ctx, lease, apitype.PauseRequest{Memory: memory})
}

// PauseWith is Pause with the request whole (Keep: the state becomes a snapshot should the
// lease expire paused).
func (c *Client) PauseWith(ctx context.Context, lease string, req apitype.PauseRequest) (apitype.PauseView, error) {
	var v apitype.PauseView
	_, err := c.do(ctx, http.MethodPost, leasePath(lease, "pause"), req, &v)
	return v, err
}

// Resume brings a paused lease back in a new sandbox under a new binding, bound to token, a
// task token for the paused lease's task (the same tenant and task id; its scopes may differ),
// since a paused lease keeps none. ttl zero takes the template's default. The answer's
// Restored says what was restored and how long it took.
func (c *Client) Resume(ctx context.Context, lease, token string, ttl time.Duration) (apitype.LeaseView, error) {
	req := apitype.ResumeRequest{Token: token}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	return c.ResumeWith(ctx, lease, req)
}

// ResumeWith is Resume with the request whole: on a node that mints task tokens, an allow list
// in place of a token, minted for the paused lease's own task.
func (c *Client) ResumeWith(ctx context.Context, lease string, req apitype.ResumeRequest) (apitype.LeaseView, error) {
	var v apitype.LeaseView
	_, err := c.do(ctx, http.MethodPost, leasePath(lease, "resume"), req, &v)
	return v, err
}

// snapshotPath is the API path of the snapshot ref, escaped as one segment (as leasePath).
func snapshotPath(ref string) string {
	return "/v1/snapshots/" + url.PathEscape(ref)
}
