package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/rule"
)

// OutputLimit is how much of each stream run returns; beyond it the middle is cut, and the
// result says so.
const OutputLimit = 64 << 10

// CreateIn is sandbox_create's input.
type CreateIn struct {
	Template string   `json:"template,omitempty" jsonschema:"the sandbox template (default: default, or with from the snapshot's); see the node's pools"`
	From     string   `json:"from,omitempty" jsonschema:"a snapshot (its id or name, from sandbox_snapshot or snapshot_list) whose workspace the sandbox starts with"`
	NoCaches bool     `json:"no_caches,omitempty" jsonschema:"start with the template's caches empty"`
	Allow    []string `json:"allow,omitempty" jsonschema:"hosts the sandbox may reach: HOST[:PORT][=CREDENTIAL] (a credential the gateway adds to requests to that host)"`
	Profiles []string `json:"profiles,omitempty" jsonschema:"named scope bundles, for example pypi, npm, crates, maven, rubygems, github-read"`
	Token    string   `json:"token,omitempty" jsonschema:"a task token (JWT) from your issuer, instead of allow and profiles"`
	TTL      string   `json:"ttl,omitempty" jsonschema:"how long the sandbox lives, for example 30m (default: the template's)"`
	Keep     bool     `json:"keep,omitempty" jsonschema:"keep the sandbox when this MCP session ends"`

	// WriteCaches is off unless asked: what a sandbox leaves in a cache, the next ones run.
	WriteCaches bool `json:"write_caches,omitempty" jsonschema:"write the template's caches back when the sandbox ends, for your next sandboxes of the template (what this one leaves there, they run)"`
}

// SandboxOut describes a sandbox.
type SandboxOut struct {
	Lease     string    `json:"lease" jsonschema:"the id every other tool takes"`
	Template  string    `json:"template"`
	Task      string    `json:"task"`
	Expires   time.Time `json:"expires" jsonschema:"when it ends; for a paused sandbox, when it is released unless resumed"`
	Workspace string    `json:"workspace" jsonschema:"the sandbox's writable working folder"`
	State     string    `json:"state,omitempty" jsonschema:"running or paused"`
	// Restored is what a sandbox from a snapshot, or a resumed one, started with.
	Restored *apitype.Restored `json:"restored,omitempty" jsonschema:"what was restored from a snapshot or a pause, and how long it took"`
}

// sandboxOut describes lease l.
func sandboxOut(l apitype.LeaseView) SandboxOut {
	return SandboxOut{Lease: l.ID, Template: l.Template, Task: l.Task, Expires: l.Expires, Workspace: "/workspace", State: l.State, Restored: l.Restored}
}

// LeaseIn names a sandbox.
type LeaseIn struct {
	Lease string `json:"lease" jsonschema:"the sandbox's lease id, from sandbox_create"`
}

// RunIn is run's and start_process's input.
type RunIn struct {
	Lease   string            `json:"lease" jsonschema:"the sandbox's lease id"`
	Command string            `json:"command,omitempty" jsonschema:"a shell command line, run with sh -c"`
	Argv    []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, instead of command"`
	Stdin   string            `json:"stdin,omitempty" jsonschema:"text given to the command as its standard input (start_process: then closed, unless keep_stdin_open)"`
	Timeout string            `json:"timeout,omitempty" jsonschema:"kill it and all it started after this long, for example 2m (run: default 5m)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the folder it runs in (default: the workspace)"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added for it"`
	// KeepStdinOpen is start_process's: its stdin stays open for send_input.
	KeepStdinOpen bool `json:"keep_stdin_open,omitempty" jsonschema:"start_process only: keep its standard input open for send_input (a REPL, a program that asks questions)"`
}

// RunOut is what run returns.
type RunOut struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty" jsonschema:"the middle of stdout was cut; the start and the end are kept"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
}

// WriteIn is write_file's input.
type WriteIn struct {
	Lease    string `json:"lease"`
	Path     string `json:"path" jsonschema:"a file in the workspace, relative to it or absolute; parent folders are made"`
	Content  string `json:"content"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
}

// ReadIn is read_file's input.
type ReadIn struct {
	Lease    string `json:"lease"`
	Path     string `json:"path"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64, for bytes that are not text"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 1 MiB)"`
}

// ReadOut is read_file's result.
type ReadOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding"`
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated,omitempty"`
}

// ListIn is list_files's input.
type ListIn struct {
	Lease string `json:"lease"`
	Path  string `json:"path,omitempty" jsonschema:"a folder in the workspace (default: the workspace)"`
	Depth int    `json:"depth,omitempty" jsonschema:"levels to list (default 1)"`
}

// OutputIn is process_output's input.
type OutputIn struct {
	Lease        string `json:"lease"`
	Process      string `json:"process" jsonschema:"the process id from start_process"`
	StdoutOffset int64  `json:"stdout_offset,omitempty" jsonschema:"read stdout from this byte (the stdout_offset a previous call returned)"`
	StderrOffset int64  `json:"stderr_offset,omitempty"`
	WaitSeconds  int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this long (at most 60) for new output while it runs"`
}

// InputIn is send_input's input.
type InputIn struct {
	Lease   string `json:"lease"`
	Process string `json:"process"`
	Input   string `json:"input,omitempty" jsonschema:"text written to its standard input (end a line with a newline)"`
	Close   bool   `json:"close,omitempty" jsonschema:"close its standard input after the text, so a program reading it sees the end"`
}

// KillIn is kill_process's input.
type KillIn struct {
	Lease   string `json:"lease"`
	Process string `json:"process"`
	Signal  string `json:"signal,omitempty" jsonschema:"TERM (default), KILL, INT, HUP, QUIT, USR1, USR2, STOP or CONT"`
}

// PortIn is expose_port's input.
type PortIn struct {
	Lease string `json:"lease"`
	Port  int    `json:"port" jsonschema:"a TCP port a server in the sandbox listens on"`
}

// ExplainIn is explain's input.
type ExplainIn struct {
	Lease  string `json:"lease"`
	URL    string `json:"url" jsonschema:"the URL a request went or would go to"`
	Method string `json:"method,omitempty" jsonschema:"GET by default"`
}

// Done is the result of a tool that only acts.
type Done struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
}

func (s *Server) addTools() {
	ro := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_create", Description: "Create a sandbox (lease a warm one) that may reach the hosts allowed, and only those; with from, its workspace is first restored from a snapshot."}, s.create)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_list", Description: "List your sandboxes, running and paused.", Annotations: ro}, s.list)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "sandbox_release", Description: "Release a sandbox: it and everything in it are destroyed (of a paused one, what its pause kept)."}, s.release)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "run", Description: "Run a command in a sandbox and wait for it: its exit code and output (streamed as progress while it runs)."}, s.run)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "write_file", Description: "Write a file in a sandbox's workspace."}, s.writeFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "read_file", Description: "Read a file from a sandbox's workspace.", Annotations: ro}, s.readFile)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "list_files", Description: "List a folder of a sandbox's workspace: names, types, sizes, modes and times.", Annotations: ro}, s.listFiles)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "start_process", Description: "Start a long-running command (a server, a watcher, a long build) in the background; read its output with process_output."}, s.startProcess)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "process_output", Description: "Read what a background process wrote since an offset, waiting a while for more; says whether it still runs and its exit code.", Annotations: ro}, s.processOutput)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "send_input", Description: "Write text to the standard input of a background process started with keep_stdin_open, and optionally close it."}, s.sendInput)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "kill_process", Description: "Send a signal to a background process and everything it started."}, s.killProcess)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "expose_port", Description: "Make a port a server in the sandbox listens on reachable at a URL, for a person to review."}, s.exposePort)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "explain", Description: "Explain the gateway's decision for a request from a sandbox: allowed or refused, by which rule, and which scope would allow it.", Annotations: ro}, s.explain)
	s.addStateTools()
}

// agentError turns an API error into one an agent can act on: what went wrong, and what to do.
func agentError(err error) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		return err
	}
	hint := map[string]string{
		"lease_not_found":  "the sandbox is gone (released or expired) or is not yours: create one with sandbox_create",
		"unknown_template": "pick a template the node has (sandbox_create without template uses default)",
		"token_refused":    "the task token or the scopes asked for are refused; ask for fewer or other hosts",
		"no_warm_sandbox":  "no sandbox was free in time; try again in a few seconds",
		"no_such_file":     "check the path with list_files",
		"file_exists":      "choose another path, or remove it first",
		"no_such_process":  "list processes with process_output's ids from start_process",
		"too_many_ports":   "this sandbox exposes as many ports as it may",
		"rate_limited":     "slow down and try again",
		"unauthorized":     "the API key is not accepted by the node",
		"no_such_snapshot": "list your snapshots with snapshot_list",
		"too_large":        "remove what need not be kept (build output, caches) and snapshot again",
		"image_gone":       "the image the snapshot ran is gone from the node: start a sandbox of the template, restore what you need, and snapshot it again",
		"snapshot_corrupt": "the snapshot does not verify and cannot be used: delete it with snapshot_delete",
		"store_down":       "the snapshot store is down; the sandbox runs on unchanged: try again later",
		"no_snapshots":     "this node keeps no snapshots, so nothing can be snapshotted, paused or resumed here",
		"token_required":   "give a task token for the sandbox's task",
	}[ae.Code]
	if hint == "" {
		return fmt.Errorf("%s", ae.Message)
	}
	return fmt.Errorf("%s (%s): %s", ae.Message, ae.Code, hint)
}

func (s *Server) create(ctx context.Context, req *mcp.CallToolRequest, in CreateIn) (*mcp.CallToolResult, SandboxOut, error) {
	st := s.sessionOf(req)
	// An empty template is the node's default, or with From the snapshot's.
	lr := apitype.LeaseRequest{Template: in.Template, Token: in.Token, TTL: in.TTL, Allow: append([]string{}, in.Allow...),
		From: in.From, NoCaches: in.NoCaches, WriteCaches: in.WriteCaches}
	for _, p := range in.Profiles {
		lr.Allow = append(lr.Allow, "@"+strings.TrimPrefix(p, "@"))
	}
	if in.Token != "" {
		if len(lr.Allow) > 0 {
			return nil, SandboxOut{}, errors.New("give a token, or allow and profiles, not both")
		}
		lr.Allow = nil
	}
	l, err := st.c.Lease(ctx, lr)
	if err != nil {
		return nil, SandboxOut{}, agentError(err)
	}
	st.mu.Lock()
	st.leases[l.ID] = in.Keep
	st.mu.Unlock()
	return nil, sandboxOut(l), nil
}

// ListOut is sandbox_list's result.
type ListOut struct {
	Sandboxes []SandboxOut `json:"sandboxes"`
}

func (s *Server) list(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, ListOut, error) {
	ls, err := s.sessionOf(req).c.List(ctx)
	if err != nil {
		return nil, ListOut{}, agentError(err)
	}
	out := ListOut{Sandboxes: []SandboxOut{}}
	for _, l := range ls {
		out.Sandboxes = append(out.Sandboxes, sandboxOut(l))
	}
	return nil, out, nil
}

func (s *Server) release(ctx context.Context, req *mcp.CallToolRequest, in LeaseIn) (*mcp.CallToolResult, Done, error) {
	st := s.sessionOf(req)
	if err := st.c.Release(ctx, in.Lease); err != nil {
		return nil, Done{}, agentError(err)
	}
	st.mu.Lock()
	delete(st.leases, in.Lease)
	st.mu.Unlock()
	return nil, Done{OK: true, Message: "released " + in.Lease}, nil
}

// command is the argv of a run or start_process input.
func command(in RunIn) ([]string, error) {
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return nil, errors.New("give command or argv, not both")
	case in.Command != "":
		return []string{"sh", "-c", in.Command}, nil
	case len(in.Argv) > 0:
		return in.Argv, nil
	}
	return nil, errors.New("a command (a shell line) or argv (a program and its arguments) is required")
}

// capture keeps the first and last halves of OutputLimit of a stream, and sends each piece
// written on as a progress notification when the caller asked for progress.
type capture struct {
	mu     sync.Mutex
	head   bytes.Buffer
	tail   []byte
	cut    bool
	notify func(string)
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if c.notify != nil {
		c.notify(string(p))
	}
	if room := OutputLimit/2 - c.head.Len(); room > 0 {
		k := min(room, len(p))
		c.head.Write(p[:k])
		p = p[k:]
	}
	if len(p) > 0 {
		c.tail = append(c.tail, p...)
		if over := len(c.tail) - OutputLimit/2; over > 0 {
			c.tail, c.cut = c.tail[over:], true
		}
	}
	return n, nil
}

func (c *capture) text() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.head.String()
	if c.cut {
		out += "\n[... output cut here by airlock ...]\n"
	}
	return strings.ToValidUTF8(out+string(c.tail), "\uFFFD"), c.cut
}

func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, RunOut, error) {
	cmd, err := command(in)
	if err != nil {
		return nil, RunOut{}, err
	}
	er := apitype.ExecRequest{Cmd: cmd, Env: in.Env, Workdir: in.Cwd, Timeout: in.Timeout}
	if er.Timeout == "" {
		er.Timeout = "5m"
	}
	var notify func(string)
	if tok := req.Params.GetProgressToken(); tok != nil {
		var mu sync.Mutex
		n := 0.0
		// One at a time, in order: progress must increase, and stdout and stderr come from two
		// goroutines.
		notify = func(chunk string) {
			mu.Lock()
			defer mu.Unlock()
			n++
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: chunk})
		}
	}
	out, errOut := &capture{notify: notify}, &capture{notify: notify}
	start := time.Now()
	var stdin *strings.Reader
	if in.Stdin != "" {
		stdin = strings.NewReader(in.Stdin)
	}
	c := s.sessionOf(req).c
	var code int
	if stdin != nil {
		code, err = c.ExecStdin(ctx, in.Lease, er, stdin, out, errOut)
	} else {
		code, err = c.Exec(ctx, in.Lease, er, out, errOut)
	}
	if err != nil {
		return nil, RunOut{}, agentError(err)
	}
	r := RunOut{ExitCode: code, DurationMS: time.Since(start).Milliseconds()}
	r.Stdout, r.StdoutTruncated = out.text()
	r.Stderr, r.StderrTruncated = errOut.text()
	return nil, r, nil
}

// headWriter keeps the first max bytes written to it and counts them all.
type headWriter struct {
	b   []byte
	n   int
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	h.n += len(p)
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// decodeContent returns the bytes content holds in encoding: utf-8 (the default) or base64.
func decodeContent(content, encoding string) ([]byte, error) {
	switch encoding {
	case "", "utf-8":
		return []byte(content), nil
	case "base64":
		return base64.StdEncoding.DecodeString(content)
	}
	return nil, fmt.Errorf("encoding %q is not utf-8 or base64", encoding)
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in WriteIn) (*mcp.CallToolResult, apitype.FileInfo, error) {
	b, err := decodeContent(in.Content, in.Encoding)
	if err != nil {
		return nil, apitype.FileInfo{}, err
	}
	info, err := s.sessionOf(req).c.PutFile(ctx, in.Lease, in.Path, bytes.NewReader(b), false)
	if err != nil {
		return nil, apitype.FileInfo{}, agentError(err)
	}
	return nil, info, nil
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in ReadIn) (*mcp.CallToolResult, ReadOut, error) {
	if in.Encoding != "" && in.Encoding != "utf-8" && in.Encoding != "base64" {
		return nil, ReadOut{}, fmt.Errorf("encoding %q is not utf-8 or base64", in.Encoding)
	}
	max := in.MaxBytes
	if max <= 0 {
		max = 1 << 20
	}
	// Only the first max bytes are kept, however large the file (up to the workspace's size).
	kept := &headWriter{max: max}
	if _, err := s.sessionOf(req).c.GetFile(ctx, in.Lease, in.Path, kept, false); err != nil {
		return nil, ReadOut{}, agentError(err)
	}
	out := ReadOut{Path: in.Path, Size: kept.n, Encoding: "utf-8", Truncated: kept.n > len(kept.b)}
	b := kept.b
	if in.Encoding == "base64" {
		out.Encoding, out.Content = "base64", base64.StdEncoding.EncodeToString(b)
	} else {
		out.Content = strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return nil, out, nil
}

func (s *Server) listFiles(ctx context.Context, req *mcp.CallToolRequest, in ListIn) (*mcp.CallToolResult, apitype.ListView, error) {
	v, err := s.sessionOf(req).c.ListFiles(ctx, in.Lease, in.Path, in.Depth)
	if err != nil {
		return nil, apitype.ListView{}, agentError(err)
	}
	return nil, v, nil
}

func (s *Server) startProcess(ctx context.Context, req *mcp.CallToolRequest, in RunIn) (*mcp.CallToolResult, apitype.ProcessInfo, error) {
	cmd, err := command(in)
	if err != nil {
		return nil, apitype.ProcessInfo{}, err
	}
	c := s.sessionOf(req).c
	p, err := c.StartProcess(ctx, in.Lease, apitype.ExecRequest{Cmd: cmd, Env: in.Env, Workdir: in.Cwd, Timeout: in.Timeout,
		Stdin: in.Stdin != "" || in.KeepStdinOpen})
	if err != nil {
		return nil, apitype.ProcessInfo{}, agentError(err)
	}
	if err := input(ctx, c, in.Lease, p.ID, in.Stdin, in.Stdin != "" && !in.KeepStdinOpen); err != nil {
		return nil, apitype.ProcessInfo{}, fmt.Errorf("process %s started, but its stdin: %w", p.ID, err)
	}
	return nil, p, nil
}

func (s *Server) sendInput(ctx context.Context, req *mcp.CallToolRequest, in InputIn) (*mcp.CallToolResult, Done, error) {
	if in.Input == "" && !in.Close {
		return nil, Done{}, errors.New("give input, close, or both")
	}
	if err := input(ctx, s.sessionOf(req).c, in.Lease, in.Process, in.Input, in.Close); err != nil {
		return nil, Done{}, err
	}
	msg := fmt.Sprintf("wrote %d bytes to %s", len(in.Input), in.Process)
	if in.Close {
		msg += " and closed its stdin"
	}
	return nil, Done{OK: true, Message: msg}, nil
}

// input writes text (if any) to a process's stdin, then closes it when asked.
func input(ctx context.Context, c *client.Client, lease, pid, text string, close bool) error {
	if text != "" {
		if err := c.SendInput(ctx, lease, pid, []byte(text)); err != nil {
			return agentError(err)
		}
	}
	if close {
		if err := c.CloseInput(ctx, lease, pid); err != nil {
			return agentError(err)
		}
	}
	return nil
}

func (s *Server) processOutput(ctx context.Context, req *mcp.CallToolRequest, in OutputIn) (*mcp.CallToolResult, apitype.OutputView, error) {
	q := client.OutputQuery{StdoutOffset: in.StdoutOffset, StderrOffset: in.StderrOffset, Max: OutputLimit,
		Wait: time.Duration(min(max(in.WaitSeconds, 0), 60)) * time.Second}
	o, err := s.sessionOf(req).c.ProcessOutput(ctx, in.Lease, in.Process, q)
	if err != nil {
		return nil, apitype.OutputView{}, agentError(err)
	}
	return nil, o, nil
}

func (s *Server) killProcess(ctx context.Context, req *mcp.CallToolRequest, in KillIn) (*mcp.CallToolResult, Done, error) {
	sig := in.Signal
	if sig == "" {
		sig = "TERM"
	}
	if err := s.sessionOf(req).c.SignalProcess(ctx, in.Lease, in.Process, sig); err != nil {
		return nil, Done{}, agentError(err)
	}
	return nil, Done{OK: true, Message: "sent " + sig + " to " + in.Process}, nil
}

func (s *Server) exposePort(ctx context.Context, req *mcp.CallToolRequest, in PortIn) (*mcp.CallToolResult, apitype.PortView, error) {
	v, err := s.sessionOf(req).c.Port(ctx, in.Lease, in.Port)
	if err != nil {
		return nil, apitype.PortView{}, agentError(err)
	}
	return nil, v, nil
}

func (s *Server) explain(ctx context.Context, req *mcp.CallToolRequest, in ExplainIn) (*mcp.CallToolResult, rule.Explanation, error) {
	ex, err := s.sessionOf(req).c.Explain(ctx, apitype.ExplainRequest{Lease: in.Lease, Method: in.Method, URL: in.URL})
	if err != nil {
		return nil, rule.Explanation{}, agentError(err)
	}
	return nil, ex, nil
}
