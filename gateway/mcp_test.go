package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/scope"
)

// mcpUpstream is a real MCP server (the Go SDK, streamable HTTP) behind the gateway's
// intercepted TLS, with three tools, counting the calls it runs.
type mcpUpstream struct {
	h      *harness
	client *http.Client // through the gateway, trusting its CA
	calls  map[string]*atomic.Int32
}

func newMCPUpstream(t *testing.T, jsonResponse bool, allowed ...string) *mcpUpstream {
	return newMCPUpstreamScope(t, jsonResponse, &scope.MCP{Tools: allowed})
}

func newMCPUpstreamScope(t *testing.T, jsonResponse bool, m *scope.MCP) *mcpUpstream {
	t.Helper()
	u := &mcpUpstream{calls: map[string]*atomic.Int32{}}
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "v1"}, nil)
	for _, name := range []string{"search_issues", "create_comment", "delete_repo"} {
		n := &atomic.Int32{}
		u.calls[name] = n
		srv.AddTool(&mcp.Tool{Name: name, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				n.Add(1)
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " ran"}}}, nil
			})
	}
	u.h = newHarness(t)
	u.h.scopes = []scope.Scope{{Host: "api.example.test", MCP: m}}
	leaf, _ := u.h.ca.Leaf("api.example.test")
	up := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		// The test server listens on loopback under a public name the gateway pins.
		&mcp.StreamableHTTPOptions{JSONResponse: jsonResponse, DisableLocalhostProtection: true}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	up.StartTLS()
	t.Cleanup(up.Close)
	addr := up.Listener.Addr().String()
	u.h.proxyHandler().dyn.Load().pins["api.example.test:443"] = netip.MustParseAddrPort(addr)
	u.h.dialer.allowed[addr] = true
	proxy, _ := url.Parse("http://" + serveHarness(t, u.h))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(u.h.ca.CertPEM)
	u.client = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: roots}}}
	return u
}

// An MCP scope lets a task call only the tools it lists: the list the agent sees holds only
// those, a call of another is answered with a JSON-RPC error it can read and never reaches the
// server, and each call is recorded with its tool and argument size, in both of the transport's
// answer forms (JSON and an event stream).
func TestMCPToolsScoped(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		t.Run(map[bool]string{true: "json", false: "event stream"}[jsonResponse], func(t *testing.T) {
			u := newMCPUpstream(t, jsonResponse, "search_issues", "create_comment")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx,
				&mcp.StreamableClientTransport{Endpoint: "https://api.example.test/mcp", HTTPClient: u.client, DisableStandaloneSSE: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			if !slices.Equal(names, []string{"create_comment", "search_issues"}) {
				t.Errorf("tools/list through the gateway: %v", names)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_issues", Arguments: map[string]any{"q": "bug"}})
			if err != nil || res.IsError || u.calls["search_issues"].Load() != 1 {
				t.Fatalf("an allowed call: %v %+v", err, res)
			}
			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_repo", Arguments: map[string]any{"repo": "acme/app"}})
			if err == nil || !strings.Contains(err.Error(), `airlock: tool "delete_repo" is not one this task may call`) {
				t.Errorf("a call of a tool the scope does not list: %v", err)
			}
			if n := u.calls["delete_repo"].Load(); n != 0 {
				t.Errorf("the refused tool ran %d times on the server", n)
			}
			t.Logf("the agent's error: %v", err)
			// A call answered on an event stream is recorded when the stream ends, a moment
			// after the agent has its result.
			var allowed, refused bool
			check := func() bool {
				u.h.sink.mu.Lock()
				defer u.h.sink.mu.Unlock()
				allowed, refused = false, false
				for _, r := range u.h.sink.recs {
					allowed = allowed || r.Decision == "allow" && strings.Contains(r.Reason, "mcp tools/call search_issues (arguments 11 bytes)")
					refused = refused || r.Decision == "deny" && r.Rule == "mcp" && strings.Contains(r.Reason, "delete_repo")
					if strings.Contains(r.Reason, "acme/app") || strings.Contains(r.Reason, "bug") {
						t.Errorf("a record holds an argument's value: %s", r.Reason)
					}
				}
				return allowed && refused
			}
			wait.Until(10*time.Second, "the records of the two calls", check)
			if !allowed || !refused {
				t.Errorf("records: allowed call %v, refused call %v", allowed, refused)
			}
		})
	}
}

// Messages an MCP server could read as another call than the one checked are refused.
func TestMCPAmbiguousMessagesRefused(t *testing.T) {
	u := newMCPUpstream(t, true, "search_issues")
	post := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "https://api.example.test/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := u.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for name, body := range map[string]string{
		"a duplicate name":    `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_issues","name":"delete_repo"}}`,
		"a duplicate method":  `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call","params":{"name":"delete_repo"}}`,
		"a duplicate params":  `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_issues"},"params":{"name":"delete_repo"}}`,
		"trailing data":       `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_issues"}} {"x":1}`,
		"a name not a string": `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["delete_repo"]}}`,
		"not JSON":            `method=tools/call&name=delete_repo`,
	} {
		code, b := post(body)
		if code != http.StatusBadRequest || !strings.Contains(b, "mcp") {
			t.Errorf("%s: %d %s", name, code, b)
		}
	}
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodGet} {
		req, _ := http.NewRequest(method, "https://api.example.test/mcp",
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo"}}`))
		resp, err := u.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed && resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Airlock-Rule") != "mcp" {
			t.Errorf("a message sent with %s: %d %s", method, resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
		}
	}
	// A batch with one refused call is refused whole, every request answered with an error.
	code, b := post(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_issues"}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_repo"}}]`)
	if code != http.StatusOK || strings.Count(b, `"code":-32001`) != 2 || !strings.Contains(b, "refused whole") {
		t.Errorf("a batch with a refused call: %d %s", code, b)
	}
	// An escaped method or name is the same method or name to the server.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"delete_repo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"name":"delete\u005frepo"}}`,
	} {
		if code, b := post(body); code != http.StatusOK || !strings.Contains(b, "not one this task may call") {
			t.Errorf("an escaped call %s: %d %s", body, code, b)
		}
	}
	// Keys in another case are the keys to a server in Go (encoding/json folds case, "ſ" too):
	// alone they are read as the keys, beside them they are duplicates.
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"Method":"tools/call","Params":{"Name":"delete_repo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","paramſ":{"name":"delete_repo"}}`,
	} {
		if code, b := post(body); code != http.StatusOK || !strings.Contains(b, "not one this task may call") {
			t.Errorf("a call with keys in another case %s: %d %s", body, code, b)
		}
	}
	if code, b := post(`{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call","params":{"name":"delete_repo"}}`); code != http.StatusBadRequest {
		t.Errorf("keys that differ only in case, both: %d %s", code, b)
	}
	if n := u.calls["delete_repo"].Load() + u.calls["search_issues"].Load(); n != 0 {
		t.Errorf("%d refused calls reached the server", n)
	}
}

// A tool list keeps only the scope's tools; an entry the gateway cannot read is dropped.
func TestFilterToolLists(t *testing.T) {
	m := &scope.MCP{Tools: []string{"a"}}
	got := string(filterToolLists([]byte(`{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"a"},{"name":"b"},{"name":"a","name":"b"},"x"]}}`), m))
	if got != `{"id":3,"jsonrpc":"2.0","result":{"tools":[{"name":"a"}]}}` {
		t.Errorf("filtered: %s", got)
	}
	if in := `{"jsonrpc":"2.0","id":4,"result":{"content":[]}}`; string(filterToolLists([]byte(in), m)) != in {
		t.Error("an answer without a tool list was changed")
	}
	if got := string(filterToolLists([]byte(`{"id":1,"id":2,"result":{"tools":[{"name":"b"}]}}`), m)); strings.Contains(got, `"b"`) {
		t.Errorf("an answer that cannot be read passed: %s", got)
	}
}

// A tool that needs approval waits for a reviewer: unanswered, the agent reads that its call is
// pending and which approval to wait on; approved for the lease, its calls run.
func TestMCPToolApproval(t *testing.T) {
	u := newMCPUpstreamScope(t, true, &scope.MCP{Tools: []string{"search_issues", "create_comment"}, Approve: []string{"create_comment"}})
	reg := approval.New(approval.Config{Hold: 500 * time.Millisecond, Audit: u.h.sink})
	u.h.proxyHandler().cfg.Approvals = reg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: "https://api.example.test/mcp", HTTPClient: u.client, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_issues"}); err != nil {
		t.Fatalf("a tool that needs no approval: %v", err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_comment", Arguments: map[string]any{"body": "hi"}})
	if err == nil || !strings.Contains(err.Error(), "approval_pending") {
		t.Fatalf("an unanswered call: %v", err)
	}
	t.Logf("the agent's error: %v", err)
	aps := reg.List(func(string) bool { return true })
	if len(aps) != 1 || !strings.Contains(aps[0].Path, "tool=create_comment") || u.calls["create_comment"].Load() != 0 {
		t.Fatalf("pending: %+v, calls %d", aps, u.calls["create_comment"].Load())
	}
	reg.Answer(aps[0].ID, "secops", true, true, "")
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_comment", Arguments: map[string]any{"body": "hi"}}); err != nil ||
		u.calls["create_comment"].Load() != 1 {
		t.Fatalf("an approved tool: %v, calls %d", err, u.calls["create_comment"].Load())
	}
}
