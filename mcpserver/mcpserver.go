// Package mcpserver is airlock's MCP server (`airlock mcp`): the tools an agent uses to create
// sandboxes, run and build in them, move files, keep processes running, show a port, learn why
// a request was refused, snapshot, pause and resume them, and release them, over the node's
// HTTP API. A session holds the sandboxes it created and releases them when it ends, unless told
// to keep one (or paused it).
package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/client"
)

// Config is what a Server needs.
type Config struct {
	// Addr is the node API's base URL; Key the API key stdio sessions use. An HTTP session uses
	// the key its requests carry (which must be Key, unless AnyKey).
	Addr, Key string
	// AnyKey lets HTTP sessions use any API key the node accepts, each session its own, so one
	// MCP listener serves several tenants.
	AnyKey bool
	// HTTP is the client for calls to the node; nil means http.DefaultClient.
	HTTP    *http.Client
	Version string
	// KeepOnClose keeps every sandbox when its session ends (otherwise only those created with
	// keep: true are kept).
	KeepOnClose bool
}

// Server serves MCP sessions. Safe for concurrent use.
type Server struct {
	cfg      Config
	mcp      *mcp.Server
	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	keys     sync.Map // hash of an API key the node accepted -> time checked
	// sessionKeys maps an HTTP session's id to the hash of the key that opened it.
	sessionKeys sync.Map
	releasing   sync.WaitGroup // ended sessions' releases still under way
}

// session is what one MCP session holds: its API client and the leases it created.
type session struct {
	c      *client.Client
	mu     sync.Mutex
	leases map[string]bool // lease id -> keep when the session ends
}

// New returns a Server with the tools registered.
func New(cfg Config) *Server {
	s := &Server{cfg: cfg, sessions: map[*mcp.ServerSession]*session{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "airlock sandboxes", Version: cfg.Version},
		&mcp.ServerOptions{Instructions: instructions})
	s.addTools()
	return s
}

const instructions = `airlock gives you sandboxes: containers with no secrets inside, whose only way out is a gateway
that allows the hosts your task's scopes name and adds credentials itself. Create one with
sandbox_create (allow the hosts you need, or profiles such as pypi or npm), then run commands,
write and read files in its workspace (/workspace), start long-running processes and read their
output later, and expose a port for review. When a request is refused, explain tells you why and
which scope would allow it. Release sandboxes you no longer need; those this session created are
released when it ends. To keep work: sandbox_snapshot saves a workspace (never a credential), and
sandbox_create with from starts any number of sandboxes from it; sandbox_pause frees a sandbox
and keeps its files until sandbox_resume, which needs a task token for the same task.`

// MCP is the underlying server, for in-process transports.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// RunStdio serves one session on stdin and stdout until the client closes it or ctx ends.
func (s *Server) RunStdio(ctx context.Context) error {
	return s.mcp.Run(ctx, &mcp.StdioTransport{})
}

// HTTPHandler serves MCP's streamable HTTP transport, each request authenticated with an API
// key ("Authorization: Bearer KEY"); a session is bound to the key that opened it, and ends
// on the client's DELETE or after idle without a request.
func (s *Server) HTTPHandler(idle time.Duration) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{SessionTimeout: idle})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || key == "" {
			httpError(w, http.StatusUnauthorized, "an API key is required as 'Authorization: Bearer KEY'")
			return
		}
		if err := s.admit(r.Context(), key); err != nil {
			httpError(w, http.StatusUnauthorized, err.Error())
			return
		}
		id := r.Header.Get("Mcp-Session-Id")
		if id != "" {
			if k, ok := s.sessionKeys.Load(id); ok && k.(string) != hashKey(key) {
				httpError(w, http.StatusForbidden, "this MCP session was opened with another API key")
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		// A new session is bound to the key that opened it.
		h.ServeHTTP(&bindSession{ResponseWriter: w, s: s, key: hashKey(key)}, r)
	})
}

// bindSession records the session id a response names against the key of its request.
type bindSession struct {
	http.ResponseWriter
	s     *Server
	key   string
	bound bool
}

func (b *bindSession) bind() {
	if !b.bound {
		b.bound = true
		if id := b.Header().Get("Mcp-Session-Id"); id != "" {
			b.s.sessionKeys.Store(id, b.key)
		}
	}
}

func (b *bindSession) WriteHeader(code int) { b.bind(); b.ResponseWriter.WriteHeader(code) }

func (b *bindSession) Write(p []byte) (int, error) { b.bind(); return b.ResponseWriter.Write(p) }

func (b *bindSession) Flush() {
	b.bind()
	if f, ok := b.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (b *bindSession) Unwrap() http.ResponseWriter { return b.ResponseWriter }

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"message":%q}}`+"\n", msg)
}

func hashKey(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

// admit checks an HTTP request's key: Key itself, or with AnyKey one the node accepts (asked
// once a minute per key).
func (s *Server) admit(ctx context.Context, key string) error {
	if subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.Key)) == 1 {
		return nil
	}
	if !s.cfg.AnyKey {
		return errors.New("this API key is not the one this MCP server serves")
	}
	h := hashKey(key)
	if t, ok := s.keys.Load(h); ok && time.Since(t.(time.Time)) < time.Minute {
		return nil
	}
	if _, err := s.client(key).Pools(ctx); err != nil {
		return fmt.Errorf("the node refused this API key: %v", err)
	}
	s.keys.Store(h, time.Now())
	return nil
}

func (s *Server) client(key string) *client.Client {
	return &client.Client{Addr: s.cfg.Addr, Token: key, HTTP: s.cfg.HTTP}
}

// sessionOf returns the state of the session a tool call came in on, made on first use with the
// key of its HTTP request (or Key, on stdio).
func (s *Server) sessionOf(req *mcp.CallToolRequest) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sessions[req.Session]
	if st == nil {
		key := s.cfg.Key
		if req.Extra != nil && req.Extra.Header != nil {
			if k, ok := strings.CutPrefix(req.Extra.Header.Get("Authorization"), "Bearer "); ok && k != "" {
				key = k
			}
		}
		st = &session{c: s.client(key), leases: map[string]bool{}}
		s.sessions[req.Session] = st
		// The session's end releases what it created.
		go func(ss *mcp.ServerSession) {
			ss.Wait()
			s.closeSession(ss)
		}(req.Session)
	}
	return st
}

// closeSession releases what the ended session created, except what it was told to keep, all
// at once; Close waits for it.
func (s *Server) closeSession(ss *mcp.ServerSession) {
	s.mu.Lock()
	st := s.sessions[ss]
	delete(s.sessions, ss)
	if st != nil {
		s.releasing.Add(1)
	}
	s.mu.Unlock()
	if id := ss.ID(); id != "" {
		s.sessionKeys.Delete(id)
	}
	if st == nil {
		return
	}
	defer s.releasing.Done()
	st.mu.Lock()
	defer st.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for id, keep := range st.leases {
		if !keep && !s.cfg.KeepOnClose {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st.c.Release(ctx, id)
			}()
		}
	}
	wg.Wait()
}

// Close releases what every open session created (a server shutting down), and returns once
// every release begun by a session's end is done.
func (s *Server) Close() {
	s.mu.Lock()
	var all []*mcp.ServerSession
	for ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		s.closeSession(ss)
	}
	s.releasing.Wait()
}
