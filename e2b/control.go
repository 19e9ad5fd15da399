package e2b

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// The control plane: E2B's sandbox endpoints, each one or two calls of the node's API.

// TokenHeader carries a task token to Sandbox.create (the SDK's `headers` option): the lease is
// bound to it, as POST /v1/leases's token is. Without one, the node mints one from allowOut
// when it can (the dev issuer of `airlock up`). Sandbox.connect of a paused sandbox needs one
// for the paused lease's task: a paused lease keeps none, and the node mints none to resume.
const TokenHeader = "X-Airlock-Token"

// KeptHeader and WhyHeader are on the answer of a pause: what it kept ("files" or
// "memory+files"), and why memory was not kept when it was asked for. The SDK's pause returns
// only true or false; these say what a resume will find.
const (
	KeptHeader = "X-Airlock-Kept"
	WhyHeader  = "X-Airlock-Why"
)

func (s *Server) controlRoutes() {
	s.control.HandleFunc("POST /v2/sandboxes", s.keyed(s.create))
	s.control.HandleFunc("POST /sandboxes", s.keyed(s.create))
	s.control.HandleFunc("GET /v2/sandboxes", s.keyed(s.list))
	s.control.HandleFunc("GET /sandboxes", s.keyed(s.list))
	s.control.HandleFunc("GET /sandboxes/{id}", s.keyed(s.sandbox(s.get)))
	s.control.HandleFunc("DELETE /sandboxes/{id}", s.keyed(s.sandbox(s.kill)))
	s.control.HandleFunc("POST /sandboxes/{id}/timeout", s.keyed(s.sandbox(s.setTimeout)))
	s.control.HandleFunc("POST /v2/sandboxes/{id}/connect", s.keyed(s.sandbox(s.connect)))
	s.control.HandleFunc("POST /sandboxes/{id}/connect", s.keyed(s.sandbox(s.connect)))
	s.control.HandleFunc("POST /sandboxes/{id}/resume", s.keyed(s.sandbox(s.connect)))
	s.control.HandleFunc("POST /sandboxes/{id}/pause", s.keyed(s.sandbox(s.pause)))
	s.control.HandleFunc("/", s.unserved)
}

// unserved answers what the control plane does not serve with what airlock does instead.
func (s *Server) unserved(w http.ResponseWriter, r *http.Request) {
	msg := fmt.Sprintf("airlock does not serve %s %s", r.Method, r.URL.Path)
	switch {
	case strings.HasSuffix(r.URL.Path, "/metrics"):
		msg += ": a sandbox's resource use is in the node's /metrics, per template"
	case strings.HasSuffix(r.URL.Path, "/network"):
		msg += ": a sandbox's network is its task token's scopes, changed by swapping the token (PUT /v1/leases/{id}/token)"
	case strings.Contains(r.URL.Path, "snapshots"), strings.HasSuffix(r.URL.Path, "/fork"):
		msg += ": snapshots and forks are airlock's own API's (POST /v1/leases/{id}/snapshots, then POST /v1/leases with from, as often as you like); pause and connect are served here"
	case strings.HasPrefix(r.URL.Path, "/templates"):
		msg += ": templates are the operator's, in the node's configuration"
	}
	writeError(w, http.StatusNotImplemented, msg)
}

// writeError answers E2B's error body, whose code the SDK reads (404 and 409 in particular).
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// Refuse answers a request the listener's bounds refused (too many connections from its
// address, or in all) with status 429 and msg, as E2B's error body.
func (s *Server) Refuse(w http.ResponseWriter, _ *http.Request, msg string) {
	writeError(w, http.StatusTooManyRequests, msg)
}

// writeAPIError answers an error of the node's API with its status and message.
func writeAPIError(w http.ResponseWriter, err error) {
	status, msg := apiStatus(err)
	writeError(w, status, msg)
}

// keyed requires the caller's API key (X-API-KEY, as the SDK sends it); the API checks it.
func (s *Server) keyed(h func(w http.ResponseWriter, r *http.Request, c *client.Client)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimSpace(r.Header.Get("X-API-KEY"))
		if key == "" {
			writeError(w, http.StatusUnauthorized, "an airlock API key is required as X-API-KEY (E2B_API_KEY)")
			return
		}
		h(w, r, s.apiClient(key))
	}
}

// sandbox checks the path's sandbox id before the handler uses it.
func (s *Server) sandbox(h func(w http.ResponseWriter, r *http.Request, c *client.Client)) func(http.ResponseWriter, *http.Request, *client.Client) {
	return func(w http.ResponseWriter, r *http.Request, c *client.Client) {
		if !sandboxID.MatchString(r.PathValue("id")) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found: airlock sandbox ids are lease ids (l-...)", r.PathValue("id")))
			return
		}
		h(w, r, c)
	}
}

// newSandbox is the body of POST /v2/sandboxes. Fields airlock cannot honour are refused by
// name rather than ignored; a field it does not know is refused too.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	MCP          json.RawMessage `json:"mcp"`
	IAM          json.RawMessage `json:"iam"`
	VolumeMounts json.RawMessage `json:"volumeMounts"`
}

type networkConfig struct {
	AllowOut           []string        `json:"allowOut"`
	DenyOut            []string        `json:"denyOut"`
	AllowPublicTraffic *bool           `json:"allowPublicTraffic"`
	MaskRequestHost    *string         `json:"maskRequestHost"`
	HTTPSPorts         []int           `json:"httpsPorts"`
	Rules              json.RawMessage `json:"rules"`
	EgressProxy        json.RawMessage `json:"egressProxy"`
}

// grant is how the refusals below tell a caller to open the network the airlock way.
const grant = "airlock denies every destination by default: grant hosts with network.allowOut " +
	"([\"pypi.org\", \"api.github.com=github\" for a host with the catalog credential github], " +
	"or \"@pypi\" for an operator's profile), or pass a task token whose scopes say so in the " + TokenHeader + " header"

// leaseRequest maps an E2B create onto a lease request, or says what airlock will not do.
func (n newSandbox) leaseRequest() (api.LeaseRequest, error) {
	req := api.LeaseRequest{Template: n.TemplateID, Env: n.EnvVars, Metadata: n.Metadata}
	if req.Template == "" || req.Template == "base" {
		req.Template = "default" // the SDK's default template is E2B's "base"
	}
	if n.Timeout != nil {
		if *n.Timeout <= 0 || *n.Timeout > math.MaxInt32 {
			return req, fmt.Errorf("timeout %d is not a number of seconds above 0", *n.Timeout)
		}
		req.TTL = (time.Duration(*n.Timeout) * time.Second).String()
	}
	switch {
	case n.AllowInternetAccess != nil && *n.AllowInternetAccess:
		return req, fmt.Errorf("allow_internet_access: true cannot be granted: %s", grant)
	case n.Secure != nil && !*n.Secure:
		return req, fmt.Errorf("secure: false cannot be granted: every airlock sandbox's API takes its access token")
	case (n.AutoPause != nil && *n.AutoPause) || (n.AutoPauseMemory != nil && *n.AutoPauseMemory) || (n.AutoResume != nil && n.AutoResume.Enabled):
		return req, fmt.Errorf("airlock does not pause sandboxes on its own: a lease ends at its timeout, and its sandbox is destroyed; pause one with pause() and resume it with Sandbox.connect (with a task token in %s)", TokenHeader)
	case present(n.MCP):
		return req, fmt.Errorf("mcp: airlock does not start an MCP gateway in the sandbox; its own MCP server (airlock mcp) drives leases from outside")
	case present(n.IAM):
		return req, fmt.Errorf("iam: airlock puts no workload token in a sandbox; credentials are asked for by catalog name in allowOut (HOST=CREDENTIAL) and injected by the gateway")
	case present(n.VolumeMounts):
		return req, fmt.Errorf("volumeMounts: airlock sandboxes mount no volumes; move files in and out with files.write and files.read")
	}
	if nw := n.Network; nw != nil {
		switch {
		case len(nw.DenyOut) > 0:
			return req, fmt.Errorf("network.denyOut is not needed and not taken: %s", grant)
		case nw.AllowPublicTraffic != nil && *nw.AllowPublicTraffic:
			return req, fmt.Errorf("network.allowPublicTraffic: true cannot be granted: a sandbox's ports are exposed to its tenant only, with POST /v1/leases/{id}/ports")
		case nw.MaskRequestHost != nil, len(nw.HTTPSPorts) > 0, present(nw.Rules), present(nw.EgressProxy):
			return req, fmt.Errorf("network: airlock takes allowOut only (maskRequestHost, httpsPorts, rules and egressProxy are E2B's); its gateway is the sandbox's one way out")
		}
		for _, h := range nw.AllowOut {
			if err := allowOutHost(h); err != nil {
				return req, err
			}
		}
		req.Allow = nw.AllowOut
	}
	return req, nil
}

// allowOutHost refuses an allowOut entry airlock cannot grant: addresses and ranges (airlock
// grants names, checked again at every connection), and everything at once.
func allowOutHost(h string) error {
	host, _, _ := strings.Cut(strings.TrimPrefix(h, "@"), "=")
	if hp, _, err := net.SplitHostPort(host); err == nil {
		host = hp
	}
	host = strings.Trim(host, "[]")
	if _, err := netip.ParsePrefix(host); err == nil || host == "*" {
		return fmt.Errorf("network.allowOut %q cannot be granted: %s (by name; airlock grants no addresses or ranges)", h, grant)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return fmt.Errorf("network.allowOut %q cannot be granted: %s (by name; airlock grants no addresses or ranges)", h, grant)
	}
	return nil
}

func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null")) && !bytes.Equal(t, []byte("{}")) && !bytes.Equal(t, []byte("[]"))
}

// sandboxView is E2B's Sandbox (create, connect) and, with the detail fields, its
// SandboxDetail and ListedSandbox.
type sandboxView struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	Alias           string  `json:"alias,omitempty"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken,omitempty"`
	Domain          *string `json:"domain"`

	CPUCount   *int              `json:"cpuCount,omitempty"`
	MemoryMB   *int64            `json:"memoryMB,omitempty"`
	DiskSizeMB *int64            `json:"diskSizeMB,omitempty"`
	StartedAt  *time.Time        `json:"startedAt,omitempty"`
	EndAt      *time.Time        `json:"endAt,omitempty"`
	State      string            `json:"state,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
}

func (s *Server) view(l api.LeaseView, detail bool) sandboxView {
	v := sandboxView{SandboxID: l.ID, TemplateID: l.Template, Alias: l.Template, ClientID: l.Node, EnvdVersion: EnvdVersion}
	if s.cfg.Domain != "" {
		v.Domain = &s.cfg.Domain
	}
	if detail {
		// A paused lease's Created is when it paused, and its Expires when it is released
		// unless resumed.
		started, end := l.Created, l.Expires
		v.StartedAt, v.EndAt, v.State, v.Metadata = &started, &end, stateOf(l), l.Metadata
		if v.Metadata == nil {
			v.Metadata = map[string]string{}
		}
		if t, ok := s.cfg.Template(l.Template); ok {
			cpus, mem, disk := int(math.Ceil(t.CPUs)), t.MemoryMB, t.WorkspaceMB
			v.CPUCount, v.MemoryMB, v.DiskSizeMB = &cpus, &mem, &disk
		}
	}
	return v
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, c *client.Client) {
	var body newSandbox
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "the sandbox request: "+err.Error())
		return
	}
	req, err := body.leaseRequest()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	req.Token = strings.TrimSpace(r.Header.Get(TokenHeader))
	l, err := c.Lease(r.Context(), req)
	if err != nil {
		status, msg := apiStatus(err)
		if ae := (*client.Error)(nil); errors.As(err, &ae) && ae.Code == "token_required" {
			msg = "this node mints no task tokens: pass the task's token in the " + TokenHeader + " header (the SDK's headers option)"
		}
		writeError(w, status, msg)
		return
	}
	v := s.view(l, false)
	v.EnvdAccessToken = s.tokens.seal(l.ID, c.Token)
	writeJSON(w, http.StatusCreated, v)
}

// stateOf is a lease's state as E2B names it: "running" or "paused".
func stateOf(l api.LeaseView) string {
	if l.State == "paused" {
		return "paused"
	}
	return "running"
}

// connect answers Sandbox.connect: a running sandbox as it is (its timeout set when given), a
// paused one resumed, bound to the task token in TokenHeader (201, as E2B answers a resume).
// What the pause kept is what comes back (KeptHeader said which): the body's memory (false:
// reboot) changes nothing, since a pause that kept memory kept no files apart from it (under
// gVisor the files are memory too) and one that kept files has no memory to drop.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, c *client.Client) {
	var body struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil && err.Error() != "EOF" {
		writeError(w, http.StatusBadRequest, "the connect request: "+err.Error())
		return
	}
	id := r.PathValue("id")
	l, err := c.Get(r.Context(), id)
	status := http.StatusOK
	switch {
	case err == nil && l.State == "paused":
		l, err = s.resume(r, c, l, body.Timeout)
		status = http.StatusCreated
	case err == nil && body.Timeout != nil:
		l, err = s.renew(r, c, id, *body.Timeout)
	}
	if err != nil {
		writeAPIError(w, err)
		return
	}
	v := s.view(l, false)
	v.EnvdAccessToken = s.tokens.seal(l.ID, c.Token)
	writeJSON(w, status, v)
}

// resume brings paused lease l back with the task token the request carries, for seconds (nil:
// the template's default).
func (s *Server) resume(r *http.Request, c *client.Client, l api.LeaseView, seconds *int64) (api.LeaseView, error) {
	tok := strings.TrimSpace(r.Header.Get(TokenHeader))
	if tok == "" {
		return api.LeaseView{}, &client.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("sandbox %s is paused: resuming it needs a task token "+
			"for its task %s in the %s header (the SDK's headers option): a paused sandbox keeps none, and airlock mints none to resume", l.ID, l.Task, TokenHeader)}
	}
	var ttl time.Duration
	if seconds != nil {
		if *seconds <= 0 || *seconds > math.MaxInt32 {
			return api.LeaseView{}, &client.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("timeout %d is not a number of seconds above 0", *seconds)}
		}
		ttl = time.Duration(*seconds) * time.Second
	}
	return c.Resume(r.Context(), l.ID, tok, ttl)
}

// renew sets the lease's end to seconds from now, as E2B's timeouts do.
func (s *Server) renew(r *http.Request, c *client.Client, id string, seconds int64) (api.LeaseView, error) {
	if seconds <= 0 || seconds > math.MaxInt32 {
		return api.LeaseView{}, &client.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("timeout %d is not a number of seconds above 0", seconds)}
	}
	return c.Renew(r.Context(), id, time.Duration(seconds)*time.Second)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, c *client.Client) {
	l, err := c.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(l, true))
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, c *client.Client) {
	if err := c.Release(r.Context(), r.PathValue("id")); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, c *client.Client) {
	var body struct {
		Timeout int64 `json:"timeout"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "the timeout request: "+err.Error())
		return
	}
	if _, err := s.renew(r, c, r.PathValue("id"), body.Timeout); err != nil {
		writeAPIError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause answers Sandbox.pause: 204 once paused, 409 when it is paused already (the SDK's
// false). E2B keeps memory unless the body's memory is false; airlock keeps it where the node's
// runtime can, and otherwise the files alone: KeptHeader and WhyHeader say which, and why.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, c *client.Client) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&body); err != nil && err.Error() != "EOF" {
		writeError(w, http.StatusBadRequest, "the pause request: "+err.Error())
		return
	}
	id := r.PathValue("id")
	l, err := c.Get(r.Context(), id)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	if l.State == "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is paused already", id))
		return
	}
	p, err := c.Pause(r.Context(), id, body.Memory == nil || *body.Memory)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	w.Header().Set(KeptHeader, string(p.Kept))
	if p.Why != "" {
		w.Header().Set(WhyHeader, p.Why)
	}
	w.WriteHeader(http.StatusNoContent)
}

// list answers GET /v2/sandboxes: the caller's leases, filtered by metadata, state, template and
// start, oldest first (order=desc: newest), a page of limit at a time after nextToken.
func (s *Server) list(w http.ResponseWriter, r *http.Request, c *client.Client) {
	q := r.URL.Query()
	var want url.Values
	if md := q.Get("metadata"); md != "" {
		var err error
		if want, err = url.ParseQuery(md); err != nil {
			writeError(w, http.StatusBadRequest, "metadata is not key=value&...: "+err.Error())
			return
		}
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		var err error
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeError(w, http.StatusBadRequest, "startedAfter is not an RFC 3339 time: "+err.Error())
			return
		}
	}
	limit, skip := 100, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "limit is not a whole number from 1 to 1000")
			return
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "nextToken is not one this server gave")
			return
		}
		skip = n
	}
	states := strings.Split(q.Get("state"), ",")
	ls, err := c.List(r.Context())
	if err != nil {
		writeAPIError(w, err)
		return
	}
	out := []sandboxView{}
	for _, l := range ls {
		match := (q.Get("state") == "" || slices.Contains(states, stateOf(l))) &&
			(q.Get("template") == "" || q.Get("template") == l.Template) && !l.Created.Before(after)
		for k := range want {
			match = match && l.Metadata[k] == want.Get(k)
		}
		if match {
			out = append(out, s.view(l, true))
		}
	}
	slices.SortStableFunc(out, func(a, b sandboxView) int { return a.StartedAt.Compare(*b.StartedAt) })
	if q.Get("order") == "desc" {
		slices.Reverse(out)
	}
	out = out[min(skip, len(out)):]
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(skip+limit))
	}
	writeJSON(w, http.StatusOK, out)
}
