package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/rule"
)

// Client calls one airlock API. Safe for concurrent use.
type Client struct {
	// Addr is the API's base URL, e.g. "http://127.0.0.1:7070".
	Addr  string
	Token string
	// HTTP is the client used; nil means http.DefaultClient.
	HTTP *http.Client
}

// Error is an error the API returned.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.raw(ctx, method, path, body, nil)
	if err != nil || out == nil {
		return resp, err
	}
	defer resp.Body.Close()
	return resp, json.NewDecoder(resp.Body).Decode(out)
}

func apiError(resp *http.Response) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
		e.Error.Message = strings.TrimSpace(string(b))
	}
	return &Error{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
}

// Lease asks for a sandbox.
func (c *Client) Lease(ctx context.Context, req apitype.LeaseRequest) (apitype.LeaseView, error) {
	var v apitype.LeaseView
	_, err := c.do(ctx, http.MethodPost, "/v1/leases", req, &v)
	return v, err
}

// Get returns a lease.
func (c *Client) Get(ctx context.Context, id string) (apitype.LeaseView, error) {
	var v apitype.LeaseView
	_, err := c.do(ctx, http.MethodGet, leasePath(id), nil, &v)
	return v, err
}

// Release ends a lease.
func (c *Client) Release(ctx context.Context, id string) error {
	resp, err := c.do(ctx, http.MethodDelete, leasePath(id), nil, nil)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// List returns the tenant's leases.
func (c *Client) List(ctx context.Context) ([]apitype.LeaseView, error) {
	var v []apitype.LeaseView
	_, err := c.do(ctx, http.MethodGet, "/v1/leases", nil, &v)
	return v, err
}

// Pools reports the node's pools.
func (c *Client) Pools(ctx context.Context) ([]apitype.PoolStatus, error) {
	var v []apitype.PoolStatus
	_, err := c.do(ctx, http.MethodGet, "/v1/pools", nil, &v)
	return v, err
}

// Approvals lists the pending approvals the key may answer.
func (c *Client) Approvals(ctx context.Context) ([]approval.Approval, error) {
	var v []approval.Approval
	_, err := c.do(ctx, http.MethodGet, "/v1/approvals", nil, &v)
	return v, err
}

// Answer approves or denies a pending approval.
func (c *Client) Answer(ctx context.Context, id string, req apitype.AnswerRequest) (approval.Approval, error) {
	var v approval.Approval
	_, err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), req, &v)
	return v, err
}

// Exec runs a command in a lease, copying its output to stdout and stderr as it arrives, and
// returns its exit code.
func (c *Client) Exec(ctx context.Context, id string, req apitype.ExecRequest, stdout, stderr io.Writer) (int, error) {
	return c.ExecStdin(ctx, id, req, nil, stdout, stderr)
}

// ExecStdin is Exec with stdin streamed to the command (nil: none).
func (c *Client) ExecStdin(ctx context.Context, id string, req apitype.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	var resp *http.Response
	var err error
	if stdin == nil {
		resp, err = c.do(ctx, http.MethodPost, leasePath(id, "exec"), req, nil)
	} else {
		h, merr := json.Marshal(req)
		if merr != nil {
			return -1, merr
		}
		resp, err = c.raw(ctx, http.MethodPost, leasePath(id, "exec"), io.NopCloser(stdin), http.Header{apitype.ExecHeader: {string(h)}})
	}
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	return readExecStream(resp.Body, stdout, stderr)
}

// ExecTTY runs req on a pseudo-terminal of req.Rows by req.Cols: what is read from stdin is
// typed into it, each size sent on resize resizes it, and all it writes goes to out. It returns
// the command's exit code.
func (c *Client) ExecTTY(ctx context.Context, id string, req apitype.ExecRequest, stdin io.Reader, resize <-chan apitype.TermSize, out io.Writer) (int, error) {
	req.TTY = true
	h, err := json.Marshal(req)
	if err != nil {
		return -1, err
	}
	pr, pw := io.Pipe()
	var mu sync.Mutex
	send := func(kind byte, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		var hdr [8]byte
		hdr[0] = kind
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
		if _, err := pw.Write(hdr[:]); err != nil {
			return err
		}
		_, err := pw.Write(p)
		return err
	}
	done := make(chan struct{})
	defer close(done)
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := stdin.Read(buf)
				if n > 0 && send(apitype.StreamStdin, buf[:n]) != nil {
					return
				}
				if err != nil {
					pw.Close() // the end of input
					return
				}
			}
		}()
	}
	go func() {
		for {
			select {
			case sz, ok := <-resize:
				if !ok {
					return
				}
				b, _ := json.Marshal(sz)
				if send(apitype.StreamResize, b) != nil {
					return
				}
			case <-done:
				return
			}
		}
	}()
	resp, err := c.raw(ctx, http.MethodPost, leasePath(id, "exec"), pr, http.Header{apitype.ExecHeader: {string(h)}})
	if err != nil {
		pw.Close()
		return -1, err
	}
	defer resp.Body.Close()
	defer pw.Close()
	return readExecStream(resp.Body, out, io.Discard)
}

// readExecStream copies an exec stream's frames to stdout and stderr and returns the exit code.
func readExecStream(body io.Reader, stdout, stderr io.Writer) (int, error) {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(body, hdr[:]); err != nil {
			return -1, fmt.Errorf("exec stream ended without an exit status: %w", err)
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		var err error
		switch hdr[0] {
		case apitype.StreamStdout:
			_, err = io.CopyN(stdout, body, n)
		case apitype.StreamStderr:
			_, err = io.CopyN(stderr, body, n)
		case apitype.StreamExit:
			var st apitype.ExitStatus
			if err := json.NewDecoder(io.LimitReader(body, n)).Decode(&st); err != nil {
				return -1, fmt.Errorf("exec exit status: %w", err)
			}
			if st.Error != "" {
				if st.Code != "" {
					return st.ExitCode, &Error{Code: st.Code, Message: st.Error}
				}
				return st.ExitCode, errors.New(st.Error)
			}
			return st.ExitCode, nil
		default:
			return -1, fmt.Errorf("exec stream: unknown frame %d", hdr[0])
		}
		if err != nil {
			return -1, fmt.Errorf("exec stream: %w", err)
		}
	}
}

// Explain asks what the gateway would decide for a request of the task token.
func (c *Client) Explain(ctx context.Context, req apitype.ExplainRequest) (rule.Explanation, error) {
	var v rule.Explanation
	_, err := c.do(ctx, http.MethodPost, "/v1/explain", req, &v)
	return v, err
}

// Renew extends a lease; ttl zero takes the template's default.
func (c *Client) Renew(ctx context.Context, id string, ttl time.Duration) (apitype.LeaseView, error) {
	var v apitype.LeaseView
	req := apitype.RenewRequest{}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	_, err := c.do(ctx, http.MethodPost, leasePath(id, "renew"), req, &v)
	return v, err
}

// SwapToken replaces a lease's task token with a new one for the same task.
func (c *Client) SwapToken(ctx context.Context, id, token string) (apitype.LeaseView, error) {
	var v apitype.LeaseView
	_, err := c.do(ctx, http.MethodPut, leasePath(id, "token"), apitype.TokenRequest{Token: token}, &v)
	return v, err
}

// Port exposes a sandbox port on a listener of its own and returns its capability URL.
func (c *Client) Port(ctx context.Context, id string, port int) (apitype.PortView, error) {
	var v apitype.PortView
	_, err := c.do(ctx, http.MethodPost, leasePath(id, "ports"), apitype.PortRequest{Port: port}, &v)
	return v, err
}

// leasePath is the API path of lease id and the segments after it, each escaped, so an id or a
// process id that holds a /, a ? or a .. names one segment and cannot reach another endpoint,
// another lease, or add a query.
func leasePath(id string, segments ...string) string {
	p := "/v1/leases/" + url.PathEscape(id)
	for _, s := range segments {
		p += "/" + url.PathEscape(s)
	}
	return p
}

func filesPath(id, path string, archive bool) string {
	p := leasePath(id, "files") + "?path=" + url.QueryEscape(path)
	if archive {
		p += "&archive=tar"
	}
	return p
}

// PutFile uploads r to path in the lease's workspace; with archive, r is a tar stream unpacked
// into the directory path.
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader, archive bool) (apitype.FileInfo, error) {
	var v apitype.FileInfo
	resp, err := c.raw(ctx, http.MethodPut, filesPath(id, path, archive), r, nil)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// GetFile downloads path from the lease's workspace to w (with archive, the directory path as a
// tar stream) and returns the SHA-256 the node computed, which it checks against what arrived.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer, archive bool) (string, error) {
	resp, err := c.raw(ctx, http.MethodGet, filesPath(id, path, archive), nil, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), resp.Body); err != nil {
		return "", err
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want := resp.Trailer.Get("X-Airlock-Sha256"); want != got {
		return "", fmt.Errorf("download of %s incomplete or corrupted (node sent sha256 %q, received %s)", path, want, got)
	}
	return got, nil
}

// AuditQuery filters audit records; every field set must match. Since and Until are RFC 3339
// times or durations back from now; After is a page's cursor (AuditPage.Next); Limit bounds a
// page (zero: the node's default, 1000).
type AuditQuery struct {
	Lease, Task, Kind, Decision, Rule, Host, Event string
	Flagged                                        bool
	Since, Until                                   string
	After                                          uint64
	Limit                                          int
}

func (q AuditQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"lease": q.Lease, "task": q.Task, "kind": q.Kind, "decision": q.Decision,
		"rule": q.Rule, "host": q.Host, "event": q.Event, "since": q.Since, "until": q.Until} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Flagged {
		v.Set("flagged", "true")
	}
	if q.After != 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// AuditPage is the answer of GET /v1/audit: one page of records, oldest first; Next is the
// cursor for the next page (AuditQuery.After), and More says there may be one. Problems are
// records of the node's trail that failed their own check and are left out.
type AuditPage struct {
	Records  []audit.Record  `json:"records"`
	Next     uint64          `json:"next"`
	More     bool            `json:"more"`
	Problems []audit.Problem `json:"problems,omitempty"`
}

// AuditPage returns one page of the tenant's audit records matching q, oldest first.
func (c *Client) AuditPage(ctx context.Context, q AuditQuery) (AuditPage, error) {
	var page AuditPage
	_, err := c.do(ctx, http.MethodGet, "/v1/audit?"+q.values().Encode(), nil, &page)
	return page, err
}

// Audit returns every one of the tenant's audit records matching q, following the pages. When
// the node reports records of its trail that failed their own check (and so are left out), the
// records come back with an *audit.TrailError.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]audit.Record, error) {
	var out []audit.Record
	var problems []audit.Problem
	for {
		page, err := c.AuditPage(ctx, q)
		if err != nil {
			return out, err
		}
		out = append(out, page.Records...)
		problems = page.Problems
		if !page.More {
			break
		}
		q.After = page.Next
	}
	if len(problems) > 0 {
		return out, &audit.TrailError{Path: "the node's audit trail", Problems: problems}
	}
	return out, nil
}

// Receipt returns the signed receipt of one of the tenant's leases (a signed note; see
// audit/receipt.Open), live or ended, from the node's trail.
func (c *Client) Receipt(ctx context.Context, lease string) ([]byte, error) {
	resp, err := c.raw(ctx, http.MethodGet, leasePath(lease, "receipt"), nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// raw sends body as is, with extra headers, and returns the response for the caller to read.
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Addr, "/")+path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, apiError(resp)
	}
	return resp, nil
}
