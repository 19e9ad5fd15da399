package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
)

// StartProcess starts req in the lease in the background and returns at once.
func (c *Client) StartProcess(ctx context.Context, id string, req apitype.ExecRequest) (apitype.ProcessInfo, error) {
	var v apitype.ProcessInfo
	_, err := c.do(ctx, http.MethodPost, leasePath(id, "processes"), req, &v)
	return v, err
}

// Processes lists the lease's background processes, oldest first.
func (c *Client) Processes(ctx context.Context, id string) ([]apitype.ProcessInfo, error) {
	var v []apitype.ProcessInfo
	_, err := c.do(ctx, http.MethodGet, leasePath(id, "processes"), nil, &v)
	return v, err
}

// OutputQuery says which output of a process to read.
type OutputQuery struct {
	StdoutOffset, StderrOffset int64
	Max                        int           // at most this many bytes of each stream (0: all kept)
	Wait                       time.Duration // for something new, while it runs (at most a minute)
	Base64                     bool          // the streams as base64, for bytes that are not text
}

// ProcessOutput reads what process pid wrote from the offsets in q.
func (c *Client) ProcessOutput(ctx context.Context, id, pid string, q OutputQuery) (apitype.OutputView, error) {
	v := url.Values{"stdout_offset": {strconv.FormatInt(q.StdoutOffset, 10)}, "stderr_offset": {strconv.FormatInt(q.StderrOffset, 10)}}
	if q.Max > 0 {
		v.Set("max", strconv.Itoa(q.Max))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
	}
	if q.Base64 {
		v.Set("encoding", "base64")
	}
	var out apitype.OutputView
	_, err := c.do(ctx, http.MethodGet, leasePath(id, "processes", pid, "output")+"?"+v.Encode(), nil, &out)
	return out, err
}

// WaitProcess waits up to timeout (at most a minute) for process pid to end, and describes it.
func (c *Client) WaitProcess(ctx context.Context, id, pid string, timeout time.Duration) (apitype.ProcessInfo, error) {
	var v apitype.ProcessInfo
	q := ""
	if timeout > 0 {
		q = "?timeout=" + url.QueryEscape(timeout.String())
	}
	_, err := c.do(ctx, http.MethodGet, leasePath(id, "processes", pid, "wait")+q, nil, &v)
	return v, err
}

// SignalProcess sends sig (TERM, KILL, INT, HUP, ...) to process pid and what it started.
func (c *Client) SignalProcess(ctx context.Context, id, pid, sig string) error {
	return c.noContent(ctx, leasePath(id, "processes", pid, "signal"), apitype.SignalRequest{Signal: sig})
}

// SendInput sends data to the input of background process pid (started with stdin, or on a
// terminal).
func (c *Client) SendInput(ctx context.Context, id, pid string, data []byte) error {
	resp, err := c.raw(ctx, http.MethodPost, leasePath(id, "processes", pid, "stdin"),
		bytes.NewReader(data), http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// CloseInput ends the input of background process pid.
func (c *Client) CloseInput(ctx context.Context, id, pid string) error {
	resp, err := c.do(ctx, http.MethodDelete, leasePath(id, "processes", pid, "stdin"), nil, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ResizeProcess resizes the terminal background process pid runs on.
func (c *Client) ResizeProcess(ctx context.Context, id, pid string, size apitype.TermSize) error {
	return c.noContent(ctx, leasePath(id, "processes", pid, "resize"), size)
}
