package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/ratelimit"
	"github.com/airlock-dev/airlock/rule"
	"github.com/airlock-dev/airlock/slots"
	"github.com/airlock-dev/airlock/snapshot"
	"github.com/airlock-dev/airlock/token"
)

// Minter mints a task token from "HOST[:PORT][=CREDENTIAL]" specs; only the dev node has one.
type Minter interface {
	// Mint mints a token of tenant for task ("" for a new task) allowing allow.
	Mint(tenant, task string, allow []string, ttl time.Duration) (string, error)
}

// Config is what a Server needs.
type Config struct {
	Pool *pool.Manager
	// Keys maps the hex SHA-256 of each API key to its tenant; keys are never stored in clear.
	Keys map[string]string
	// RatePerKey and BurstPerKey limit requests per key; 0 disables.
	RatePerKey, BurstPerKey int
	Minter                  Minter // nil: leases need a token
	// Metrics serves /metrics when set.
	Metrics http.Handler
	// Explain answers POST /v1/explain: what the gateway would decide for a request.
	Explain func(token, method, url string) (rule.Explanation, error)
	// PortHost is the address exposed sandbox ports listen on (the API's host); empty disables
	// POST /v1/leases/{id}/ports. MaxPortsPerLease bounds how many one lease exposes at once (0:
	// DefaultMaxPortsPerLease); PortSweep is how often ports of leases that ended elsewhere
	// are closed (0: 10s).
	PortHost         string
	MaxPortsPerLease int
	PortSweep        time.Duration
	// Audit is the node's audit trail, served (per tenant) by GET /v1/audit; nil serves none.
	Audit AuditTrail
	// Receipt makes the signed receipt of a tenant's lease from this node's trail, served by
	// GET /v1/leases/{id}/receipt; nil serves none.
	Receipt func(ctx context.Context, tenant, lease string) ([]byte, error)
	// NodeAuth signs the calls this node forwards to the node holding a lease, and checks the
	// ones other nodes forward here. Nil (or no secret): nothing is forwarded, and a routing
	// header is never believed.
	NodeAuth *NodeAuth
	// Approvals are the requests this node's gateway holds for reviewers, listed and answered
	// by GET /v1/approvals and POST /v1/approvals/{id}; nil serves none.
	Approvals *approval.Registry
	// Reviewers maps the hex SHA-256 of each reviewer key to its reviewer: the API takes those
	// keys on the approval endpoints only (they cannot lease or run anything).
	Reviewers map[string]Reviewer
	// Streams bounds the calls held open (commands, process output and waits, file transfers,
	// audit pages): so many for the node, so many per tenant (all its keys together), so no
	// tenant can hold them all. Reserved is not used: the API serves reviewer keys no stream.
	// Zero: DefaultStreams.
	Streams slots.Limits
	// Calls bounds every other call in progress the same way, whatever holds it open (a slow
	// body or a slow read of its answer), with Reserved of them kept for reviewer keys
	// (approvals). Zero: DefaultCalls. How long a body or an answer may take, and the
	// connections before any key is known, are the server's (package slots).
	Calls slots.Limits
	// PeerTransport carries forwarded calls (TLS towards other nodes' APIs); nil means
	// http.DefaultTransport.
	PeerTransport http.RoundTripper
	Logger        *slog.Logger
}

// Server is the HTTP API. Safe for concurrent use.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	rate    *ratelimit.Limiter[string]
	ports   *ports
	streams *slots.Set
	calls   *slots.Set
}

// DefaultStreams are the API's stream bounds when the configuration names none (api.streams):
// 1024 calls held open at once, 256 of them by one tenant.
var DefaultStreams = slots.Limits{Max: 1024, PerIdentity: 256}

// DefaultCalls are the API's bounds of the other calls in progress when the configuration
// names none (api.calls): 1024 at once, 128 of them by one tenant, 64 kept for reviewer keys.
var DefaultCalls = slots.Limits{Max: 1024, PerIdentity: 128, Reserved: 64}

// New returns the API handler.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Streams.Max == 0 {
		cfg.Streams = DefaultStreams
	}
	cfg.Streams.Reserved = 0
	if cfg.Calls.Max == 0 {
		cfg.Calls = DefaultCalls
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), rate: ratelimit.New[string](cfg.RatePerKey, cfg.BurstPerKey),
		streams: slots.New(cfg.Streams), calls: slots.New(cfg.Calls),
		ports: &ports{host: cfg.PortHost, pool: cfg.Pool, perLease: cmp.Or(cfg.MaxPortsPerLease, DefaultMaxPortsPerLease),
			every: cmp.Or(cfg.PortSweep, 10*time.Second)}}
	s.route("POST /v1/leases", call, s.createLease)
	s.route("GET /v1/leases", call, s.listLeases)
	s.route("GET /v1/leases/{id}", call, s.owned(s.getLease))
	s.route("DELETE /v1/leases/{id}", call, s.owned(s.releaseLease))
	s.route("POST /v1/leases/{id}/exec", terminal, s.owned(s.exec))
	s.route("POST /v1/leases/{id}/renew", call, s.owned(s.renew))
	s.route("PUT /v1/leases/{id}/token", call, s.owned(s.swapToken))
	s.route("POST /v1/leases/{id}/ports", call, s.owned(s.exposePort))
	s.route("PUT /v1/leases/{id}/files", upload, s.owned(s.putFile))
	s.route("GET /v1/leases/{id}/files", stream, s.owned(s.getFile))
	s.route("GET /v1/leases/{id}/fs/list", call, s.owned(s.listFiles))
	s.route("GET /v1/leases/{id}/fs/stat", call, s.owned(s.statFile))
	s.route("POST /v1/leases/{id}/fs/mkdir", call, s.owned(s.mkdir))
	s.route("POST /v1/leases/{id}/fs/remove", call, s.owned(s.remove))
	s.route("POST /v1/leases/{id}/fs/move", call, s.owned(s.move))
	s.route("POST /v1/leases/{id}/processes", call, s.owned(s.startProcess))
	s.route("GET /v1/leases/{id}/processes", call, s.owned(s.listProcesses))
	s.route("GET /v1/leases/{id}/processes/{pid}/output", stream, s.owned(s.processOutput))
	s.route("GET /v1/leases/{id}/processes/{pid}/wait", stream, s.owned(s.waitProcess))
	s.route("POST /v1/leases/{id}/processes/{pid}/signal", call, s.owned(s.signalProcess))
	s.route("POST /v1/leases/{id}/processes/{pid}/stdin", call, s.owned(s.processInput))
	s.route("DELETE /v1/leases/{id}/processes/{pid}/stdin", call, s.owned(s.closeProcessInput))
	s.route("POST /v1/leases/{id}/processes/{pid}/resize", call, s.owned(s.resizeProcess))
	s.route("POST /v1/leases/{id}/snapshots", stream, s.owned(s.takeSnapshot))
	s.route("POST /v1/leases/{id}/pause", stream, s.owned(s.pauseLease))
	s.route("POST /v1/leases/{id}/resume", stream, s.resumeLease)
	s.route("GET /v1/snapshots", call, s.listSnapshots)
	s.route("GET /v1/snapshots/{ref}", call, s.getSnapshot)
	s.route("DELETE /v1/snapshots/{ref}", call, s.deleteSnapshot)
	s.route("GET /v1/audit", stream, s.audit)
	s.route("GET /v1/leases/{id}/receipt", call, s.receipt)
	s.route("GET /v1/pools", call, s.pools)
	s.mux.HandleFunc("GET /v1/approvals", s.approver(s.listApprovals))
	s.mux.HandleFunc("POST /v1/approvals/{id}", s.approver(s.answerApproval))
	s.route("POST /v1/explain", call, s.explain)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.ready)
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// tenantHandler serves a call of tenant, the tenant auth admitted it for.
type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string)

// route serves pattern with h for a tenant's key, h holding what k holds for the call's life.
func (s *Server) route(pattern string, k kind, h tenantHandler) {
	s.mux.HandleFunc(pattern, s.auth(k, s.tenanted(h)))
}

// HashKey returns the form in which an API key is configured.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// bearer returns the hex SHA-256 of the request's bearer key ("" when it carries none).
func bearer(r *http.Request) string {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return HashKey(strings.TrimSpace(key))
}

// admitRate refuses a key over its rate, saying so; it reports whether the request may go on.
func (s *Server) admitRate(w http.ResponseWriter, hash string) bool {
	if s.rate.Allow(hash) {
		return true
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("more than %d requests a second with this key", s.cfg.RatePerKey))
	return false
}

// auth admits a tenant's API key, within its rate, and holds what k holds for the tenant while
// h serves the call.
func (s *Server) auth(k kind, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hash := bearer(r)
		tenant, known := s.cfg.Keys[hash]
		if hash == "" || !known {
			writeError(w, http.StatusUnauthorized, "unauthorized", "a valid API key is required as 'Authorization: Bearer KEY'")
			return
		}
		if !s.admitRate(w, hash) {
			return
		}
		release, ok := s.hold(w, r, k, caller{tenant: tenant})
		if !ok {
			return
		}
		defer release()
		h(w, r.WithContext(context.WithValue(r.Context(), admittedKey{}, admitted{tenant: tenant, keyHash: hash})))
	}
}

// admitted is who auth admitted a call for: the tenant, and the hex SHA-256 of the key it used.
// auth puts it in the request's context for tenanted, which is the only reader of the tenant.
type admitted struct{ tenant, keyHash string }

type admittedKey struct{}

// tenantOf returns the tenant auth admitted r for; ok is false when r did not come through auth
// (a route mounted without it), and then the call must be refused, never served for no tenant.
func tenantOf(r *http.Request) (tenant string, ok bool) {
	a, ok := r.Context().Value(admittedKey{}).(admitted)
	return a.tenant, ok
}

// tenanted serves h with the tenant auth admitted the call for. A call auth did not admit (a
// route mounted without it, a mistake of this package) is refused with 500 naming the route,
// rather than served for an empty tenant or panicking.
func (s *Server) tenanted(h tenantHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, ok := tenantOf(r)
		if !ok {
			s.cfg.Logger.Error("api: a tenant's route was served without authentication; refused", "method", r.Method, "path", r.URL.Path)
			writeError(w, http.StatusInternalServerError, "unauthenticated_route",
				fmt.Sprintf("%s %s is served without authentication on this node, so no tenant is known; it is refused (a fault of the node, not of the call)", r.Method, r.URL.Path))
			return
		}
		h(w, r, tenant)
	}
}

// keyHashOf is the hex SHA-256 of the API key auth admitted r with ("" when none did).
func keyHashOf(r *http.Request) string {
	a, _ := r.Context().Value(admittedKey{}).(admitted)
	return a.keyHash
}

// owned serves a request about one lease here when this node holds it, and otherwise forwards it
// to the node that does (whose engine runs the sandbox and whose broker minted its credentials),
// with the caller's own API key, signed as coming from this node. A call another node forwarded
// (its signature checked) is served here and never forwarded again; the pool refuses it if this
// node does not hold the lease after all. Routing headers a client sends are dropped unread.
func (s *Server) owned(h tenantHandler) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		if _, routed := s.cfg.NodeAuth.Verify(r); routed {
			h(w, r, tenant)
			return
		}
		l, err := s.cfg.Pool.Get(r.Context(), tenant, r.PathValue("id"))
		if err != nil || l.Node == s.cfg.Pool.Node() {
			h(w, r, tenant)
			return
		}
		if s.cfg.NodeAuth == nil || len(s.cfg.NodeAuth.Secret) == 0 {
			writeError(w, http.StatusServiceUnavailable, "node_down",
				fmt.Sprintf("lease %s is on node %s, and this node has no node secret to forward with", l.ID, l.Node))
			return
		}
		api, err := s.cfg.Pool.NodeAPI(r.Context(), l.Node)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "node_down", err.Error())
			return
		}
		target, err := url.Parse(api)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, "node_down", err.Error())
			return
		}
		if r.Header.Get(ExecHeader) != "" {
			http.NewResponseController(w).EnableFullDuplex()
		}
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				s.cfg.NodeAuth.Sign(pr.Out)
			},
			Transport:     s.cfg.PeerTransport,
			FlushInterval: -1, // exec output streams as it comes
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				writeError(w, http.StatusBadGateway, "node_unreachable", fmt.Sprintf("node %s: %v", l.Node, err))
			},
		}
		rp.ServeHTTP(w, r)
	}
}

func view(l pool.Lease) LeaseView {
	v := LeaseView{ID: l.ID, Template: l.Template, Task: l.Task, Tenant: l.Tenant, Node: l.Node,
		Sandbox: l.Sandbox.ID, Address: l.Sandbox.Addr.String(), Created: l.Created, Expires: l.Expires, Start: l.Start,
		Metadata: l.Metadata, State: "running"}
	if r := l.Restored; r != nil {
		v.Restored = &apitype.Restored{Snapshot: r.Snapshot, Files: r.Files, Size: r.Size, TookMS: r.Took.Milliseconds(), Kept: r.Kept}
	}
	return v
}

// pausedView is a paused lease in a listing: no sandbox, no address.
func pausedView(p pool.Paused) LeaseView {
	pv := pauseView(p)
	return LeaseView{ID: p.Lease, Template: p.Template, Task: p.Task, Tenant: p.Tenant, Created: p.Paused, Expires: p.Until, State: "paused", Pause: &pv}
}

func (s *Server) createLease(w http.ResponseWriter, r *http.Request, tenant string) {
	var req LeaseRequest
	if !readJSON(w, r, &req) {
		return
	}
	ttl, ok := readDuration(w, "ttl", req.TTL)
	if !ok {
		return
	}
	if req.Template == "" && req.From == "" {
		req.Template = "default"
	}
	raw := req.Token
	switch {
	case raw != "" && len(req.Allow) > 0:
		writeError(w, http.StatusBadRequest, "bad_request", "give a token or an allow list, not both")
		return
	case raw == "" && s.cfg.Minter == nil:
		writeError(w, http.StatusBadRequest, "token_required", "a task token is required (this node mints none)")
		return
	case raw == "":
		// The minted token lasts as long as the template lets a lease last, so the lease can be
		// renewed up to that (a lease never outlives its token); it is bound to this lease alone
		// and never leaves the node.
		mintTTL := ttl
		template := req.Template
		if m, err := s.cfg.Pool.SnapshotInfo(r.Context(), tenant, req.From); template == "" && err == nil {
			template = m.Template
		}
		if t, ok := s.cfg.Pool.Template(template); ok {
			mintTTL = max(mintTTL, t.DefaultTTL, t.MaxTTL)
		}
		var err error
		if raw, err = s.cfg.Minter.Mint(tenant, "", req.Allow, mintTTL); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
	}
	l, err := s.cfg.Pool.Lease(r.Context(), pool.LeaseRequest{Tenant: tenant, Template: req.Template, Token: raw, TTL: ttl, Key: keyHashOf(r),
		Env: req.Env, Metadata: req.Metadata, From: req.From, NoCaches: req.NoCaches, WriteCaches: req.WriteCaches})
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, view(l))
}

func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, tenant string) {
	ls, err := s.cfg.Pool.List(r.Context(), tenant)
	if err != nil {
		writePoolError(w, err)
		return
	}
	out := make([]LeaseView, 0, len(ls))
	for _, l := range ls {
		out = append(out, view(l))
	}
	paused, err := s.cfg.Pool.PausedLeases(r.Context(), tenant)
	if err != nil {
		writePoolError(w, err)
		return
	}
	for _, p := range paused {
		out = append(out, pausedView(p))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request, tenant string) {
	l, err := s.cfg.Pool.Get(r.Context(), tenant, r.PathValue("id"))
	if errors.Is(err, pool.ErrLeaseNotFound) {
		if p, perr := s.cfg.Pool.PausedLease(r.Context(), tenant, r.PathValue("id")); perr == nil {
			writeJSON(w, http.StatusOK, pausedView(p))
			return
		}
	}
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, view(l))
}

func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request, tenant string) {
	err := s.cfg.Pool.Release(r.Context(), tenant, r.PathValue("id"))
	if errors.Is(err, pool.ErrLeaseNotFound) {
		// A paused lease holds no sandbox: its release deletes what its pause kept. A resume of
		// it under way refuses that, which is the answer.
		switch perr := s.cfg.Pool.ReleasePaused(r.Context(), tenant, r.PathValue("id")); {
		case perr == nil:
			err = nil
		case errors.Is(perr, pool.ErrLeaseState):
			err = perr
		}
	}
	if err != nil {
		writePoolError(w, err)
		return
	}
	s.ports.closeLease(r.PathValue("id"))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) exposePort(w http.ResponseWriter, r *http.Request, tenant string) {
	if s.cfg.PortHost == "" {
		writeError(w, http.StatusNotFound, "not_found", "this node exposes no ports")
		return
	}
	var req PortRequest
	if !readJSON(w, r, &req) {
		return
	}
	v, err := s.ports.expose(r.Context(), tenant, r.PathValue("id"), req.Port)
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request, tenant string) {
	var req RenewRequest
	if !readJSON(w, r, &req) {
		return
	}
	ttl, ok := readDuration(w, "ttl", req.TTL)
	if !ok {
		return
	}
	l, err := s.cfg.Pool.Renew(r.Context(), tenant, r.PathValue("id"), ttl)
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, view(l))
}

func (s *Server) swapToken(w http.ResponseWriter, r *http.Request, tenant string) {
	var req TokenRequest
	if err := decode(r, &req); errors.Is(err, slots.ErrSlowBody) {
		writeBodyError(w, err)
		return
	} else if err != nil || req.Token == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "body must be {\"token\": JWT}")
		return
	}
	l, err := s.cfg.Pool.SwapToken(r.Context(), tenant, r.PathValue("id"), req.Token)
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, view(l))
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, tenant string) {
	info, err := s.cfg.Pool.PutFile(r.Context(), tenant, r.PathValue("id"), r.URL.Query().Get("path"), r.Body, isTar(r))
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request, tenant string) {
	id, p := r.PathValue("id"), r.URL.Query().Get("path")
	if err := s.cfg.Pool.StatFile(r.Context(), tenant, id, p, isTar(r)); err != nil {
		writePoolError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// The body streams as it is read; a failure part-way can only cut it short, which the
	// client sees as a missing trailer.
	w.Header().Set("Trailer", "X-Airlock-Sha256")
	info, err := s.cfg.Pool.GetFile(r.Context(), tenant, id, p, w, isTar(r))
	if err == nil {
		w.Header().Set("X-Airlock-Sha256", info.SHA256)
	}
}

// isTar reports whether a files request moves a tar archive of a directory (?archive=tar).
func isTar(r *http.Request) bool { return r.URL.Query().Get("archive") == "tar" }

// setTerminal puts what req asks of a terminal into pr: its size, and TERM (xterm-256color unless
// the request names one or sets it).
func setTerminal(req ExecRequest, pr *pool.ExecRequest) {
	pr.TTY, pr.Size = true, pool.TermSize{Rows: req.Rows, Cols: req.Cols}
	if pr.Env == nil {
		pr.Env = map[string]string{}
	}
	if _, set := pr.Env["TERM"]; !set {
		pr.Env["TERM"] = cmp.Or(req.Term, "xterm-256color")
	}
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request, tenant string) {
	var req ExecRequest
	var stdin io.Reader
	if h := r.Header.Get(ExecHeader); h != "" {
		dec := json.NewDecoder(strings.NewReader(h))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", ExecHeader+": "+err.Error())
			return
		}
		// The body streams in as stdin while output streams out.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			writeError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
		stdin = r.Body
	} else if err := decode(r, &req); err != nil {
		writeBodyError(w, err)
		return
	}
	timeout, ok := readDuration(w, "timeout", req.Timeout)
	if !ok {
		return
	}
	pr := pool.ExecRequest{Cmd: req.Cmd, Env: req.Env, Workdir: req.Workdir, Timeout: timeout}
	if req.TTY {
		if stdin == nil {
			writeError(w, http.StatusBadRequest, "bad_request", "a terminal exec (tty) sends its input as frames: the request goes in the "+ExecHeader+" header")
			return
		}
		setTerminal(req, &pr)
		in, resize := readInputFrames(stdin)
		stdin, pr.Resize = in, resize
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Pool.Held(r.Context(), tenant, id); err != nil {
		writePoolError(w, err)
		return
	}
	if len(req.Cmd) == 0 {
		writeError(w, http.StatusBadRequest, "bad_request", "cmd: at least the program is required")
		return
	}
	w.Header().Set("Content-Type", "application/vnd.airlock.exec-stream")
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w, rc: http.NewResponseController(w)}
	code, err := s.cfg.Pool.Exec(r.Context(), tenant, id, pr, stdin, fw.stream(StreamStdout), fw.stream(StreamStderr))
	st := ExitStatus{ExitCode: code}
	if err != nil {
		st.Error = err.Error()
		_, st.Code = poolError(err)
	}
	b, _ := json.Marshal(st)
	fw.frame(StreamExit, b)
}

func (s *Server) explain(w http.ResponseWriter, r *http.Request, tenant string) {
	var req ExplainRequest
	if !readJSON(w, r, &req) {
		return
	}
	switch {
	case req.Lease != "" && req.Token != "":
		writeError(w, http.StatusBadRequest, "bad_request", "explain a token or a lease, not both")
		return
	case req.Lease != "":
		l, err := s.cfg.Pool.Get(r.Context(), tenant, req.Lease)
		if err != nil {
			writePoolError(w, err)
			return
		}
		req.Token = l.Token
	case req.Token == "":
		writeError(w, http.StatusBadRequest, "bad_request", "explain needs a task token or a lease")
		return
	}
	if s.cfg.Explain == nil {
		writeError(w, http.StatusNotFound, "not_found", "this node has no gateway to explain")
		return
	}
	ex, err := s.cfg.Explain(req.Token, req.Method, req.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

func (s *Server) pools(w http.ResponseWriter, r *http.Request, _ string) {
	ps, err := s.cfg.Pool.Pools(r.Context())
	if err != nil {
		writePoolError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ps)
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.cfg.Pool.Warm(r.Context()); !ok {
		writeError(w, http.StatusServiceUnavailable, "warming", why)
		return
	}
	io.WriteString(w, "ready\n")
}

// readInputFrames reads a terminal exec's request body: stdin frames come out of the reader,
// resize frames out of the channel, which is closed when the body ends or is malformed.
func readInputFrames(body io.Reader) (io.Reader, <-chan pool.TermSize) {
	pr, pw := io.Pipe()
	resize := make(chan pool.TermSize, 1)
	go func() {
		defer close(resize)
		var hdr [8]byte
		for {
			if _, err := io.ReadFull(body, hdr[:]); err != nil {
				pw.Close()
				return
			}
			n := int64(binary.BigEndian.Uint32(hdr[4:]))
			switch hdr[0] {
			case StreamStdin:
				if _, err := io.CopyN(pw, body, n); err != nil {
					pw.CloseWithError(err)
					return
				}
			case StreamResize:
				var sz pool.TermSize
				b := make([]byte, min(n, 257))
				if _, err := io.ReadFull(body, b); err != nil || n > 256 || json.Unmarshal(b, &sz) != nil {
					pw.CloseWithError(errors.New("a resize frame is not {\"rows\":R,\"cols\":C}"))
					return
				}
				// Only the newest size matters: one still waiting is replaced.
				select {
				case <-resize:
				default:
				}
				resize <- sz
			default:
				pw.CloseWithError(fmt.Errorf("exec input: unknown frame %d", hdr[0]))
				return
			}
		}
	}()
	return pr, resize
}

// frameWriter writes exec frames; its streams may be written from two goroutines.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	rc  *http.ResponseController
	err error
}

func (f *frameWriter) frame(stream byte, p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, f.err
	}
	var hdr [8]byte
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(p)))
	if _, f.err = f.w.Write(hdr[:]); f.err == nil {
		_, f.err = f.w.Write(p)
	}
	if f.err == nil {
		f.err = f.rc.Flush()
	}
	if f.err != nil {
		return 0, f.err
	}
	return len(p), nil
}

type streamWriter struct {
	f  *frameWriter
	id byte
}

func (s streamWriter) Write(p []byte) (int, error) { return s.f.frame(s.id, p) }

func (f *frameWriter) stream(id byte) io.Writer { return streamWriter{f, id} }

// parseDuration reads an optional positive duration field; empty is zero.
func parseDuration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive duration", field, v)
	}
	return d, nil
}

// readJSON decodes the request body into v, answering 400 naming the problem when it cannot
// (408 when the body came too slowly, naming the setting).
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := decode(r, v); err != nil {
		writeBodyError(w, err)
		return false
	}
	return true
}

// writeBodyError answers a request whose body could not be read or decoded: 408 naming the
// setting when it came too slowly (package slots), else 400.
func writeBodyError(w http.ResponseWriter, err error) {
	if errors.Is(err, slots.ErrSlowBody) {
		writeError(w, http.StatusRequestTimeout, "body_timeout", err.Error())
		return
	}
	writeError(w, http.StatusBadRequest, "bad_request", err.Error())
}

// readDuration parses an optional duration field, answering 400 when it is not one.
func readDuration(w http.ResponseWriter, field, v string) (time.Duration, bool) {
	d, err := parseDuration(field, v)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return 0, false
	}
	return d, true
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// writePoolError is the one place pool errors become HTTP statuses (poolError).
func writePoolError(w http.ResponseWriter, err error) {
	status, code := poolError(err)
	writeError(w, status, code, err.Error())
}

// poolError is the HTTP status and error code of a pool error, in an answer or an exec's exit
// frame.
func poolError(err error) (int, string) {
	switch {
	case errors.Is(err, pool.ErrLeaseNotFound):
		return http.StatusNotFound, "lease_not_found"
	case errors.Is(err, pool.ErrUnknownTemplate):
		return http.StatusNotFound, "unknown_template"
	case errors.Is(err, pool.ErrTokenRefused), errors.Is(err, token.ErrInvalid):
		return http.StatusForbidden, "token_refused"
	case errors.Is(err, pool.ErrJTIInUse):
		return http.StatusConflict, "jti_in_use"
	case errors.Is(err, pool.ErrNoWarm):
		return http.StatusServiceUnavailable, "no_warm_sandbox"
	case errors.Is(err, pool.ErrNoSuchProcess):
		return http.StatusNotFound, "no_such_process"
	case errors.Is(err, pool.ErrNoSuchFile):
		return http.StatusNotFound, "no_such_file"
	case errors.Is(err, pool.ErrFileExists):
		return http.StatusConflict, "file_exists"
	case errors.Is(err, pool.ErrTimedOut):
		return http.StatusRequestTimeout, "timed_out"
	case errors.Is(err, pool.ErrBadRequest):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, pool.ErrNotOwner):
		return http.StatusConflict, "not_owner"
	case errors.Is(err, pool.ErrLeaseState):
		return http.StatusConflict, "lease_state"
	case errors.Is(err, pool.ErrNoSuchSnapshot):
		return http.StatusNotFound, "no_such_snapshot"
	case errors.Is(err, pool.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, pool.ErrImageGone):
		return http.StatusConflict, "image_gone"
	case errors.Is(err, pool.ErrNoSnapshots):
		return http.StatusNotImplemented, "no_snapshots"
	case errors.Is(err, snapshot.ErrCorrupt):
		return http.StatusUnprocessableEntity, "snapshot_corrupt"
	case errors.Is(err, snapshot.ErrStoreDown), errors.Is(err, snapshot.ErrKeysDown):
		return http.StatusServiceUnavailable, "store_down"
	case errors.Is(err, errTooManyPorts):
		return http.StatusTooManyRequests, "too_many_ports"
	case errors.Is(err, slots.ErrSlowBody):
		return http.StatusRequestTimeout, "body_timeout"
	}
	return http.StatusServiceUnavailable, "unavailable"
}
