package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlock-dev/airlock/api/apitype"
)

// ListFiles lists the folder path of the lease's workspace ("" for the workspace), depth levels
// down (at least 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) (apitype.ListView, error) {
	var v apitype.ListView
	q := url.Values{"path": {path}, "depth": {strconv.Itoa(max(depth, 1))}}
	_, err := c.do(ctx, http.MethodGet, leasePath(id, "fs", "list")+"?"+q.Encode(), nil, &v)
	return v, err
}

// Stat describes path in the lease's workspace; a path that is not there is an *Error with
// Code "no_such_file".
func (c *Client) Stat(ctx context.Context, id, path string) (apitype.Entry, error) {
	var v apitype.Entry
	_, err := c.do(ctx, http.MethodGet, leasePath(id, "fs", "stat")+"?"+url.Values{"path": {path}}.Encode(), nil, &v)
	return v, err
}

// Mkdir makes the folder path and its parents.
func (c *Client) Mkdir(ctx context.Context, id, path string) error {
	return c.noContent(ctx, leasePath(id, "fs", "mkdir"), apitype.PathRequest{Path: path})
}

// Remove removes path: a file, symlink or empty folder, or with recursive any folder.
func (c *Client) Remove(ctx context.Context, id, path string, recursive bool) error {
	return c.noContent(ctx, leasePath(id, "fs", "remove"), apitype.PathRequest{Path: path, Recursive: recursive})
}

// Move renames from to to within the workspace; with overwrite, what to names is replaced.
func (c *Client) Move(ctx context.Context, id, from, to string, overwrite bool) error {
	return c.noContent(ctx, leasePath(id, "fs", "move"), apitype.MoveRequest{From: from, To: to, Overwrite: overwrite})
}

func (c *Client) noContent(ctx context.Context, path string, in any) error {
	resp, err := c.do(ctx, http.MethodPost, path, in, nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}
