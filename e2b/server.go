package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
)

// EnvdVersion is the envd version reported for every sandbox: the SDK's feature gates up to it
// are served (stdin control at 0.3.0, a default user at 0.4.0, closing stdin at 0.5.2,
// octet-stream and gzip uploads at 0.5.7); file metadata (0.6.2) is not.
const EnvdVersion = "0.5.7"

// envdPort is the port the SDK names in E2b-Sandbox-Port for envd.
const envdPort = "49983"

// Config is what a Server needs.
type Config struct {
	// API is the node's API (pool/api.Server); every E2B call is made through it, in process,
	// as the caller's API key.
	API http.Handler
	// Template describes a template by name (cpu, memory and disk for the SDK's getInfo).
	Template func(name string) (pool.Template, bool)
	// Secret seals the sandboxes' access tokens; every node of a deployment must have the same
	// one (the node secret), so a token works whichever node's listener it reaches.
	Secret []byte
	// Node is this node's name, reported as the sandbox's clientID.
	Node string
	// Domain is the sandbox domain reported to the SDK (getHost builds PORT-ID.DOMAIN from it);
	// empty reports none.
	Domain string
	// PollEvery is how often a WatchDir stream's watch lists its folder; 0 means a second.
	PollEvery time.Duration
	Logger    *slog.Logger
}

// Server answers the E2B SDK. Safe for concurrent use.
type Server struct {
	cfg           Config
	control, envd *http.ServeMux
	http          *http.Client
	tokens        *sealer
}

// New returns the E2B handler.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = time.Second
	}
	tokens, err := newSealer(cfg.Secret)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, control: http.NewServeMux(), envd: http.NewServeMux(), tokens: tokens,
		http: &http.Client{Transport: inProcess{cfg.API}}}
	s.controlRoutes()
	s.envdRoutes()
	return s, nil
}

// ServeHTTP sends a request that names a sandbox (E2b-Sandbox-Id, as the SDK's envd calls do)
// to the sandbox API, and any other to the control plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		s.envd.ServeHTTP(w, r)
		return
	}
	s.control.ServeHTTP(w, r)
}

// sandboxID matches the sandbox ids this server hands out (lease ids): anything else is refused
// before it reaches a path of the API.
var sandboxID = regexp.MustCompile(`^l-[0-9a-f]{24}$`)

// apiClient is the node's API as the holder of key.
func (s *Server) apiClient(key string) *client.Client {
	return &client.Client{Addr: "http://airlock.api", Token: key, HTTP: s.http}
}

// apiStatus is the HTTP status of an error from the API (503 when it is not an API answer).
func apiStatus(err error) (int, string) {
	var ae *client.Error
	if errors.As(err, &ae) {
		return ae.Status, ae.Message
	}
	return http.StatusServiceUnavailable, err.Error()
}

// inProcess is an http.RoundTripper that serves each request with a handler in this process:
// the response streams through a pipe as the handler writes and flushes it.
type inProcess struct{ h http.Handler }

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	rw := &pipeResponse{header: http.Header{}, body: pw, ready: make(chan struct{})}
	in := req.Clone(req.Context())
	in.RequestURI, in.RemoteAddr = req.URL.RequestURI(), "e2b"
	if in.Body == nil {
		in.Body = http.NoBody
	}
	trailer := http.Header{}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				pw.CloseWithError(fmt.Errorf("api: %v", v))
			}
			rw.WriteHeader(http.StatusOK)
			for _, k := range strings.Split(rw.header.Get("Trailer"), ",") {
				if k = strings.TrimSpace(k); k != "" {
					trailer.Set(k, rw.header.Get(k))
				}
			}
			pw.Close()
		}()
		t.h.ServeHTTP(rw, in)
	}()
	select {
	case <-rw.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{Status: http.StatusText(rw.status), StatusCode: rw.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.sent, Body: pr, Trailer: trailer, ContentLength: -1, Request: req}, nil
}

// pipeResponse is the handler's side of inProcess.
type pipeResponse struct {
	header, sent http.Header
	body         *io.PipeWriter
	once         sync.Once
	status       int
	ready        chan struct{}
}

func (p *pipeResponse) Header() http.Header { return p.header }

func (p *pipeResponse) WriteHeader(status int) {
	p.once.Do(func() {
		p.status, p.sent = status, p.header.Clone()
		close(p.ready)
	})
}

func (p *pipeResponse) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return p.body.Write(b)
}

// Flush sends the header; the body is unbuffered.
func (p *pipeResponse) Flush() { p.WriteHeader(http.StatusOK) }

// EnableFullDuplex lets a handler read its request while it writes (http.ResponseController).
func (p *pipeResponse) EnableFullDuplex() error { return nil }

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
