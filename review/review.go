// Package review serves the review page for security teams: the leases of a time range, each
// lease's ledger, destinations and denials, filtered on the server through the audit index,
// exported as CSV, JSON lines or OCSF, followed live, and marked reviewed.
//
// The page is served on a listener of its own (never the API's origin, nor a sandbox port's),
// under a Content-Security-Policy that allows no inline script and no other origin; every value
// a record holds (hosts, paths, commands a sandbox chose) is rendered by html/template as text,
// and the one script adds rows with textContent only.
package review

import (
	"context"
	"crypto/subtle"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/ratelimit"
	"github.com/airlock-dev/airlock/slots"
)

// Trail is what the page needs of the node's audit trail.
type Trail interface {
	Flush(ctx context.Context) error
	Query(ctx context.Context, q audit.Query, fn func(audit.Record) error) (audit.Result, error)
	Leases(ctx context.Context, q audit.LeaseQuery) ([]audit.LeaseSummary, bool, error)
	// Written is the seq of the last record a query sees: where a live tail starts.
	Written() uint64
}

// Reviewer is a reviewer key's identity (approval.Reviewer): on this page it reads, marks and
// answers approvals.
type Reviewer = approval.Reviewer

// AllTenants, in a reviewer's tenants, lets it read every tenant's leases.
const AllTenants = approval.AllTenants

// Config is what a Server needs.
type Config struct {
	Trail Trail
	// Sink takes the records of review marks.
	Sink audit.Sink
	// Keys maps the hex SHA-256 of each API key to its tenant (the API's keys): a tenant signs
	// in with one and sees its own leases only.
	Keys map[string]string
	// Reviewers maps the hex SHA-256 of each reviewer key to its reviewer.
	Reviewers map[string]Reviewer
	// Secure says the page is served over TLS: the session cookie is then Secure (and
	// __Host- prefixed).
	Secure bool
	// Checkpoint returns the seq the node's latest signed checkpoint covers (0: none).
	Checkpoint func() uint64
	// Verify checks the chain of one lease's records with the node's public key.
	Verify func(ctx context.Context, lease string) (*audit.Report, error)
	// Approvals are the requests the node's gateway holds for reviewers, answered on the
	// Approvals view; nil shows none.
	Approvals *approval.Registry
	// SessionTTL is how long a session lasts (0: 8 hours).
	SessionTTL time.Duration
	// Streams bounds the live tails and exports served at once: for the node, per identity (a
	// reviewer key by name, or a tenant with all its API keys, however many sessions it
	// signs in), and the share only reviewer keys may take. A Max of 0: DefaultStreams.
	Streams slots.Limits
	// Calls bounds every other page and form of a session in progress, the same way, however
	// it is held (a slow form body, a slow read of the page). A Max of 0: DefaultCalls. How
	// long a body or an answer may take, and the connections before anyone signs in, are the
	// server's (package slots).
	Calls  slots.Limits
	Logger *slog.Logger
	Now    func() time.Time
}

// Server is the review page. Safe for concurrent use.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	pages    *template.Template
	sessions *sessions
	signins  *ratelimit.Limiter[string]
	// acts bounds, per session, what costs the node more than a page: marks (each a record)
	// and chain verifications (each a read of the lease's segments).
	acts *ratelimit.Limiter[string]
	// streams bounds the live tails (each asks the trail every second, for up to tailFor) and
	// exports (each reads every record its filters select) held open at once.
	streams *slots.Set
	// calls bounds the other pages and forms in progress.
	calls *slots.Set
}

// DefaultStreams are the page's stream bounds when the configuration names none
// (review.streams): 64 live tails and exports at once, 4 per identity, 16 kept for reviewer
// keys.
var DefaultStreams = slots.Limits{Max: 64, PerIdentity: 4, Reserved: 16}

// DefaultCalls are the page's bounds of the other pages and forms in progress when the
// configuration names none (review.calls): 256 at once, 16 per identity, 64 kept for reviewer
// keys.
var DefaultCalls = slots.Limits{Max: 256, PerIdentity: 16, Reserved: 64}

//go:embed templates static
var files embed.FS

// New returns the review page's handler.
func New(cfg Config) (*Server, error) {
	if cfg.Trail == nil || cfg.Sink == nil {
		return nil, fmt.Errorf("review: the page needs the node's audit trail")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Checkpoint == nil {
		cfg.Checkpoint = func() uint64 { return 0 }
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.Streams.Max == 0 {
		cfg.Streams = DefaultStreams
	}
	if cfg.Calls.Max == 0 {
		cfg.Calls = DefaultCalls
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(files, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("review: %w", err)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), pages: pages, sessions: newSessions(cfg.SessionTTL, cfg.Now),
		signins: ratelimit.New[string](5, 20), acts: ratelimit.New[string](2, 10), streams: slots.New(cfg.Streams), calls: slots.New(cfg.Calls)}
	static, _ := fs.Sub(files, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/static/favicon.svg", http.StatusMovedPermanently)
	})
	s.mux.HandleFunc("GET /signin", s.signinPage)
	s.mux.HandleFunc("POST /signin", s.signin)
	s.mux.HandleFunc("POST /signout", s.session(call, s.signout))
	s.mux.HandleFunc("GET /{$}", s.session(call, s.overview))
	s.mux.HandleFunc("GET /leases/{id}", s.session(call, s.ledger))
	s.mux.HandleFunc("GET /destinations", s.session(call, s.destinations))
	s.mux.HandleFunc("GET /denials", s.session(call, s.denials))
	s.mux.HandleFunc("GET /tail", s.session(call, s.tailPage))
	s.mux.HandleFunc("GET /tail/events", s.session(stream, s.tailEvents))
	s.mux.HandleFunc("GET /export", s.session(stream, s.export))
	s.mux.HandleFunc("POST /marks", s.session(call, s.mark))
	s.mux.HandleFunc("GET /approvals", s.session(call, s.approvals))
	s.mux.HandleFunc("POST /approvals/{id}", s.session(call, s.answer))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, http.StatusNotFound, fmt.Sprintf("no page %s %s", r.Method, r.URL.Path))
	})
	return s, nil
}

// csp allows the page's own script, style and images and nothing else: no inline script or
// style, no other origin, no framing, no form posting elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.headers(w)
	s.mux.ServeHTTP(w, r)
}

// headers are every answer's: the CSP and what keeps the page to its own origin.
func (s *Server) headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: a browser then sends "Origin: null" with forms
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if s.cfg.Secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

// sameOrigin refuses a state-changing request another site could have made: a browser says
// where a request comes from in Sec-Fetch-Site and Origin, and both must be this page.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		want := "http://" + r.Host
		if r.TLS != nil {
			want = "https://" + r.Host
		}
		return subtle.ConstantTimeCompare([]byte(o), []byte(want)) == 1
	}
	return true
}

// fail answers with an error page naming what is wrong.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	s.pages.ExecuteTemplate(w, "error.html", map[string]any{"Status": status, "Text": http.StatusText(status), "Message": msg,
		"Session": sessionOf(r)})
}

// render writes a page.
func (s *Server) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := s.pages.ExecuteTemplate(w, name, data); err != nil {
		s.cfg.Logger.Warn("review page", "page", name, "err", err)
	}
}
