package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/scope"
)

// Bounds of the JSON-RPC the gateway reads for an MCP scope: a request body, a JSON answer, one
// server-sent event.
const maxMCPMessage = 16 << 20

// JSON-RPC error code of a call the gateway refused (in the server-defined range).
const mcpRefusedCode = -32001

// checkMCP applies an MCP scope to a request of the streamable HTTP transport. A POST carries one
// JSON-RPC message or a batch; each tools/call must name a tool the scope lists, or the whole
// body is answered with JSON-RPC errors the agent can read, and nothing is sent. The body is
// read strictly (no duplicate keys anywhere a decision looks, keys matched as a lenient server
// matches them, escapes decoded), so the server cannot read another call than the one checked;
// it goes on byte for byte.
func (p *Proxy) checkMCP(r *http.Request, x *exchange) error {
	switch r.Method {
	case http.MethodGet, http.MethodDelete:
		// The server's event stream and the session's end, whose answers are filtered; a body
		// on them would be a message no one checked.
		if r.ContentLength != 0 {
			return refuse(http.StatusBadRequest, rule.MCP, fmt.Sprintf("an MCP %s with a body", r.Method), "")
		}
		return nil
	case http.MethodPost:
	default:
		return refuse(http.StatusMethodNotAllowed, rule.MCP,
			fmt.Sprintf("MCP's streamable HTTP takes GET, POST and DELETE; %s is not read for tool calls", r.Method), "")
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return refuse(http.StatusUnsupportedMediaType, rule.MCP,
			fmt.Sprintf("an MCP message in content encoding %q cannot be read for its tool calls", enc), "send it unencoded")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMCPMessage+1))
	if err != nil {
		return refuse(http.StatusBadRequest, rule.BadRequest, "reading the request body: "+err.Error(), "")
	}
	if len(body) > maxMCPMessage {
		return refuse(http.StatusRequestEntityTooLarge, rule.MCP, fmt.Sprintf("an MCP message over %d bytes", maxMCPMessage), "")
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	msgs, batch, err := mcpMessages(body)
	if err != nil {
		return refuse(http.StatusBadRequest, rule.MCP, "an MCP message the gateway cannot read unambiguously: "+err.Error(), "")
	}
	var notes, refused, held []string
	ids := make([]json.RawMessage, 0, len(msgs))
	for _, m := range msgs {
		if id, ok := member(m, "id"); ok {
			ids = append(ids, id)
		}
		// Compared decoded: "tools\/call" and "tools\u002fcall" are the server's tools/call too.
		var method string
		if raw, ok := member(m, "method"); ok && json.Unmarshal(raw, &method) != nil {
			return refuse(http.StatusBadRequest, rule.MCP, "a JSON-RPC method that is not a string", "")
		}
		if method != "tools/call" {
			continue
		}
		params, _ := member(m, "params")
		tool, args, err := mcpCall(params)
		if err != nil {
			return refuse(http.StatusBadRequest, rule.MCP, "a tools/call the gateway cannot read unambiguously: "+err.Error(), "")
		}
		if !x.scope.MCP.AllowsTool(tool) {
			refused = append(refused, tool)
			continue
		}
		if x.scope.MCP.NeedsApproval(tool) {
			held = append(held, tool)
		}
		if len(notes) < 20 { // the record stays a line
			notes = append(notes, fmt.Sprintf("mcp tools/call %s (arguments %d bytes)", tool, len(args)))
		}
	}
	if len(refused) == 0 {
		for _, tool := range held {
			if err := p.approveTool(r, x, tool, ids, batch); err != nil {
				return err
			}
		}
		x.note = strings.Join(notes, ", ")
		return nil
	}
	reason := fmt.Sprintf("tool %q is not one this task may call (it may call %s)", refused[0], strings.Join(x.scope.MCP.Tools, ", "))
	if batch && len(msgs) > 1 {
		reason += "; the batch is refused whole"
	}
	ref := refuse(http.StatusForbidden, rule.MCP, reason, "a task token whose mcp scope lists the tool")
	ref.Status, ref.respond = http.StatusOK, func(w http.ResponseWriter) { writeMCPErrors(w, ids, batch, "airlock: "+reason) }
	return ref
}

// approveTool holds a call of a tool that needs approval as a scope's approval holds a request
// (the tool is part of what is approved); unanswered or denied, every request of the body gets a
// JSON-RPC error saying so, the approval's id in it.
func (p *Proxy) approveTool(r *http.Request, x *exchange, tool string, ids []json.RawMessage, batch bool) error {
	if p.cfg.Approvals == nil {
		return refuse(http.StatusForbidden, rule.ApprovalDenied, fmt.Sprintf("tool %q needs approval, and this gateway takes no approvals", tool), "")
	}
	o := p.cfg.Approvals.Wait(r.Context(), approval.Request{Lease: x.b.Lease, Tenant: x.b.Tenant, Task: x.b.Task, Method: x.method,
		Host: x.host, Port: x.port, Path: x.path, Query: "tool=" + tool, Scope: x.scope.String(), LeaseEnd: x.b.Expires})
	var ref *Refusal
	switch {
	case o.Approved:
		return nil
	case o.Denied:
		ref = refuse(http.StatusForbidden, rule.ApprovalDenied, fmt.Sprintf("reviewer %s denied the call of %q (approval %s): %s",
			o.Reviewer, tool, o.Pending.ID, o.Reason), "")
	default:
		ref = refuse(http.StatusForbidden, rule.ApprovalPending, fmt.Sprintf("approval_pending: approval %s: a reviewer must approve the call of %q; call again to wait on it",
			o.Pending.ID, tool), "airlock approve "+o.Pending.ID)
	}
	ref.Status, ref.respond = http.StatusOK, func(w http.ResponseWriter) { writeMCPErrors(w, ids, batch, "airlock: "+ref.Reason) }
	return ref
}

// mcpMessages reads a body as one JSON-RPC message or a batch of them.
func mcpMessages(body []byte) ([]map[string]json.RawMessage, bool, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(body, &raws); err != nil {
			return nil, true, err
		}
		out := make([]map[string]json.RawMessage, 0, len(raws))
		for _, raw := range raws {
			m, err := strictObject(raw)
			if err != nil {
				return nil, true, err
			}
			out = append(out, m)
		}
		return out, true, nil
	}
	m, err := strictObject(body)
	if err != nil {
		return nil, false, err
	}
	return []map[string]json.RawMessage{m}, false, nil
}

// mcpCall reads a tools/call's params: the tool's name and its arguments (their size is what is
// recorded; their values never are).
func mcpCall(params json.RawMessage) (string, json.RawMessage, error) {
	p, err := strictObject(params)
	if err != nil {
		return "", nil, fmt.Errorf("params: %v", err)
	}
	var name string
	raw, _ := member(p, "name")
	if err := json.Unmarshal(raw, &name); err != nil || name == "" {
		return "", nil, errors.New("params.name is not a tool's name")
	}
	args, _ := member(p, "arguments")
	return name, args, nil
}

// maxMCPKeys bounds the members of one object the gateway reads.
const maxMCPKeys = 1000

// strictObject decodes a JSON object into its members, refusing a duplicate key (parsers keep
// the first or the last, so the server could read another value than the one checked) and
// anything after the object. Keys that differ only in case are duplicates too: a server in Go
// matches keys without regard to case ("Method", even "paramſ"), so each is looked up the same
// way (member).
func strictObject(raw []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	out := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, errors.New("a key is not a string")
		}
		if _, dup := member(out, k); dup {
			return nil, fmt.Errorf("the key %q appears twice (keys are compared without regard to case)", k)
		}
		if len(out) == maxMCPKeys {
			return nil, fmt.Errorf("an object of more than %d members", maxMCPKeys)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something follows the object")
	}
	return out, nil
}

// memberKey is member with the key as the object spells it.
func memberKey(m map[string]json.RawMessage, k string) (string, json.RawMessage, bool) {
	for key, v := range m {
		if strings.EqualFold(key, k) {
			return key, v, true
		}
	}
	return "", nil, false
}

// member returns the member of m whose key is k without regard to case (strictObject lets at
// most one be).
func member(m map[string]json.RawMessage, k string) (json.RawMessage, bool) {
	if v, ok := m[k]; ok {
		return v, true
	}
	for key, v := range m {
		if strings.EqualFold(key, k) {
			return v, true
		}
	}
	return nil, false
}

// writeMCPErrors answers every request of a refused body with a JSON-RPC error (notifications,
// having no id, get none), as the server would answer: one object, or a batch.
func writeMCPErrors(w http.ResponseWriter, ids []json.RawMessage, batch bool, message string) {
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	type answer struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   rpcError        `json:"error"`
	}
	var out []answer
	for _, id := range ids {
		out = append(out, answer{"2.0", id, rpcError{mcpRefusedCode, message}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if len(out) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	if batch {
		enc.Encode(out)
		return
	}
	enc.Encode(out[0])
}

// filterMCPResponse makes an MCP server's answers list only the scope's tools: a JSON answer is
// read whole (bounded) and rewritten; an event stream is rewritten event by event as it flows.
// An answer the gateway cannot read (another content encoding) is refused rather than passed.
func filterMCPResponse(resp *http.Response, m *scope.MCP) error {
	if enc := resp.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return refuse(http.StatusBadGateway, rule.MCP,
			fmt.Sprintf("the MCP server answered in content encoding %q, which cannot be checked for the tools it lists", enc), "")
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxMCPMessage+1))
		resp.Body.Close()
		if err != nil || len(body) > maxMCPMessage {
			return refuse(http.StatusBadGateway, rule.MCP, "the MCP server's answer could not be read whole", "")
		}
		body = filterToolLists(body, m)
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
	case "text/event-stream":
		resp.Body = &sseFilter{src: resp.Body, br: bufio.NewReaderSize(resp.Body, 64<<10), m: m}
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return nil
}

// filterToolLists returns a JSON-RPC answer (or batch) with every tools/list result's tools cut
// to the ones m allows; an answer it cannot read is returned as a JSON-RPC error instead, never
// as it came.
func filterToolLists(body []byte, m *scope.MCP) []byte {
	msgs, batch, err := mcpMessages(body)
	if err != nil {
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"airlock: the MCP server's answer could not be read unambiguously"}}`)
	}
	changed := false
	for _, msg := range msgs {
		resKey, res, ok := memberKey(msg, "result")
		if !ok {
			continue
		}
		r, err := strictObject(res)
		if err != nil {
			continue // a result that is not an object holds no tool list
		}
		toolsKey, tools, ok := memberKey(r, "tools")
		if !ok {
			continue
		}
		var list []json.RawMessage
		if json.Unmarshal(tools, &list) != nil {
			list = nil
		}
		kept := []json.RawMessage{}
		for _, t := range list {
			obj, err := strictObject(t)
			if err != nil {
				continue
			}
			var name string
			raw, _ := member(obj, "name")
			if json.Unmarshal(raw, &name) == nil && m.AllowsTool(name) {
				kept = append(kept, t)
			}
		}
		r[toolsKey], _ = json.Marshal(kept)
		msg[resKey], _ = json.Marshal(r)
		changed = true
	}
	if !changed {
		return body
	}
	var out []byte
	if batch {
		out, _ = json.Marshal(msgs)
	} else {
		out, _ = json.Marshal(msgs[0])
	}
	return out
}

// sseFilter rewrites a server-sent event stream: each event's data (a JSON-RPC message) goes
// through filterToolLists; its other fields pass as they came.
type sseFilter struct {
	src io.Closer
	br  *bufio.Reader
	m   *scope.MCP
	out bytes.Buffer
	err error
}

func (f *sseFilter) Read(p []byte) (int, error) {
	for f.out.Len() == 0 && f.err == nil {
		f.err = f.event()
	}
	if f.out.Len() > 0 {
		return f.out.Read(p)
	}
	return 0, f.err
}

// event reads one event (up to its blank line) and writes it, filtered, to out.
func (f *sseFilter) event() error {
	var fields []string
	var data []string
	size := 0
	for {
		line, err := f.br.ReadString('\n')
		size += len(line)
		if size > maxMCPMessage {
			return errors.New("an event of the MCP server's stream is too large to check")
		}
		if err != nil {
			if line != "" || len(fields)+len(data) > 0 {
				return fmt.Errorf("the MCP server's stream ends inside an event")
			}
			return err
		}
		text := strings.TrimRight(line, "\r\n")
		if text == "" {
			break
		}
		if v, ok := strings.CutPrefix(text, "data:"); ok {
			data = append(data, strings.TrimPrefix(v, " "))
			continue
		}
		fields = append(fields, text)
	}
	for _, l := range fields {
		f.out.WriteString(l + "\n")
	}
	if joined := strings.Join(data, "\n"); strings.TrimSpace(joined) == "" {
		for _, l := range data {
			f.out.WriteString("data: " + l + "\n") // an empty event (a stream's priming one) carries no message
		}
	} else {
		msg := filterToolLists([]byte(joined), f.m)
		for _, l := range strings.Split(string(msg), "\n") {
			f.out.WriteString("data: " + l + "\n")
		}
	}
	f.out.WriteString("\n")
	return nil
}

func (f *sseFilter) Close() error { return f.src.Close() }
