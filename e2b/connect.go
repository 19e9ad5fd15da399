package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/slots"
)

// The Connect protocol (connectrpc.com/docs/protocol) with its JSON codec, as the SDK speaks
// it: unary calls are a JSON body each way; a server stream is one enveloped request message,
// then enveloped messages ending with an end-of-stream envelope that carries the error, if any.

// maxMessage bounds one request message (SendInput carries at most 1 MiB, base64 encoded).
const maxMessage = 4 << 20

// envelope flags.
const (
	flagCompressed byte = 0x01
	flagEndStream  byte = 0x02
)

// rpcError is a Connect error: a code from the protocol's list and a message.
type rpcError struct{ code, msg string }

func (e *rpcError) Error() string { return e.code + ": " + e.msg }

func rpcErr(code, format string, args ...any) *rpcError {
	return &rpcError{code: code, msg: fmt.Sprintf(format, args...)}
}

// asRPC maps any error (the API's answers in particular) to a Connect error.
func asRPC(err error) *rpcError {
	var re *rpcError
	if errors.As(err, &re) {
		return re
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return rpcErr("deadline_exceeded", "%v", err)
	case errors.Is(err, context.Canceled):
		return rpcErr("canceled", "%v", err)
	}
	var ae *client.Error
	if !errors.As(err, &ae) {
		return rpcErr("unavailable", "%v", err)
	}
	code := map[int]string{
		http.StatusBadRequest: "invalid_argument", http.StatusUnauthorized: "unauthenticated", http.StatusForbidden: "permission_denied",
		http.StatusNotFound: "not_found", http.StatusConflict: "already_exists", http.StatusRequestTimeout: "deadline_exceeded",
		http.StatusRequestEntityTooLarge: "resource_exhausted", http.StatusTooManyRequests: "resource_exhausted",
		http.StatusServiceUnavailable: "unavailable", http.StatusBadGateway: "unavailable",
	}[ae.Status]
	if code == "" {
		code = "internal"
	}
	if ae.Code == "not_owner" {
		code = "failed_precondition"
	}
	return &rpcError{code: code, msg: ae.Message}
}

// rpcStatus is the HTTP status of a unary call's error code.
func rpcStatus(code string) int {
	switch code {
	case "canceled":
		return 499
	case "invalid_argument", "failed_precondition", "out_of_range":
		return http.StatusBadRequest
	case "deadline_exceeded":
		return http.StatusGatewayTimeout
	case "not_found":
		return http.StatusNotFound
	case "already_exists", "aborted":
		return http.StatusConflict
	case "permission_denied":
		return http.StatusForbidden
	case "resource_exhausted":
		return http.StatusTooManyRequests
	case "unimplemented":
		return http.StatusNotImplemented
	case "unavailable":
		return http.StatusServiceUnavailable
	case "unauthenticated":
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

func (e *rpcError) body() map[string]string {
	return map[string]string{"code": e.code, "message": e.msg}
}

// call is what an RPC handler is given: the sandbox (its lease id), the API as the key its
// access token carries, and the request message.
type call struct {
	ctx   context.Context
	r     *http.Request
	id    string
	api   *client.Client
	input json.RawMessage
}

// decode reads the request message into v, refusing fields the method does not have.
func (c call) decode(v any) error {
	if len(bytes.TrimSpace(c.input)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return rpcErr("invalid_argument", "the request message: %v", err)
	}
	return nil
}

// authorize opens the request's access token for the sandbox it names.
func (s *Server) authorize(r *http.Request) (string, *client.Client, *rpcError) {
	id := r.Header.Get("E2b-Sandbox-Id")
	if !sandboxID.MatchString(id) {
		return "", nil, rpcErr("not_found", "sandbox %q not found: airlock sandbox ids are lease ids (l-...)", id)
	}
	if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != envdPort {
		return "", nil, rpcErr("unimplemented", "port %s of a sandbox is not served here: expose it with POST /v1/leases/%s/ports", p, id)
	}
	tok := r.Header.Get("X-Access-Token")
	if tok == "" {
		return "", nil, rpcErr("unauthenticated", "the sandbox's access token (X-Access-Token, given at create) is required")
	}
	key, err := s.tokens.open(id, tok)
	if err != nil {
		return "", nil, rpcErr("unauthenticated", "%v", err)
	}
	if user, ok := basicUser(r); ok {
		if err := checkUser(user); err != nil {
			return "", nil, err
		}
	}
	return id, s.apiClient(key), nil
}

// basicUser is the user of the SDK's "Authorization: Basic base64(user:)".
func basicUser(r *http.Request) (string, bool) {
	u, _, ok := r.BasicAuth()
	return u, ok
}

// checkUser refuses a user other than the sandbox's own: commands run as the template's
// unprivileged user, whom the SDK calls "user".
func checkUser(u string) *rpcError {
	switch u {
	case "", "user":
		return nil
	case "root":
		return rpcErr("permission_denied", "airlock runs nothing as root: commands and files are the sandbox's unprivileged user's")
	}
	return rpcErr("invalid_argument", "user %q does not exist: an airlock sandbox has one user, \"user\"", u)
}

// deadline applies the call's Connect-Timeout-Ms.
func deadline(r *http.Request) (context.Context, context.CancelFunc, *rpcError) {
	v := r.Header.Get("Connect-Timeout-Ms")
	if v == "" {
		ctx, cancel := context.WithCancel(r.Context())
		return ctx, cancel, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || len(v) > 10 {
		return nil, nil, rpcErr("invalid_argument", "Connect-Timeout-Ms %q is not a positive number of at most 10 digits", v)
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
	return ctx, cancel, nil
}

// unary serves a unary method.
func (s *Server) unary(h func(call) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fail := func(e *rpcError) {
			writeJSON(w, rpcStatus(e.code), e.body())
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			w.Header().Set("Accept-Post", "application/json")
			writeJSON(w, http.StatusUnsupportedMediaType, rpcErr("unimplemented", "this server speaks Connect's JSON codec only (Content-Type: application/json)").body())
			return
		}
		if enc := r.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
			fail(rpcErr("unimplemented", "request compression %q is not supported", enc))
			return
		}
		id, api, e := s.authorize(r)
		if e != nil {
			fail(e)
			return
		}
		ctx, cancel, e := deadline(r)
		if e != nil {
			fail(e)
			return
		}
		defer cancel()
		in, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
		if errors.Is(err, slots.ErrSlowBody) {
			writeJSON(w, http.StatusRequestTimeout, rpcErr("deadline_exceeded", "%v", err).body())
			return
		}
		if err != nil || len(in) > maxMessage {
			fail(rpcErr("resource_exhausted", "the request message is unreadable or larger than %d bytes", maxMessage))
			return
		}
		out, err := h(call{ctx: ctx, r: r, id: id, api: api, input: in})
		if err != nil {
			fail(asRPC(err))
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// stream is a server stream's sending side; send is safe for concurrent use.
type stream struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func (st *stream) envelope(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, st.err = st.w.Write(hdr[:]); st.err == nil {
		if _, st.err = st.w.Write(b); st.err == nil {
			st.err = st.rc.Flush()
		}
	}
	return st.err
}

func (st *stream) send(v any) error { return st.envelope(0, v) }

// keepalive is how long a stream may stay silent: the SDK's Keepalive-Ping-Interval (seconds),
// else 30 s, and never more than 50 s.
func keepalive(r *http.Request) time.Duration {
	if n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, 50*time.Second)
	}
	return 30 * time.Second
}

// serverStream serves a server-streaming method: the answer is 200 once the request is read,
// and every error after that travels in the end-of-stream envelope.
func (s *Server) serverStream(h func(call, *stream) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		st := &stream{w: w, rc: http.NewResponseController(w)}
		end := func(err error) {
			if err == nil {
				st.envelope(flagEndStream, struct{}{})
				return
			}
			st.envelope(flagEndStream, map[string]any{"error": asRPC(err).body()})
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/connect+json" {
			w.Header().Set("Content-Type", "application/json")
			writeJSON(w, http.StatusUnsupportedMediaType, rpcErr("unimplemented", "this server speaks Connect's JSON codec only (Content-Type: application/connect+json)").body())
			return
		}
		if enc := r.Header.Get("Connect-Content-Encoding"); enc != "" && enc != "identity" {
			end(rpcErr("unimplemented", "message compression %q is not supported", enc))
			return
		}
		id, api, e := s.authorize(r)
		if e != nil {
			end(e)
			return
		}
		ctx, cancel, e := deadline(r)
		if e != nil {
			end(e)
			return
		}
		defer cancel()
		in, err := readEnvelope(r.Body)
		if err != nil {
			end(err)
			return
		}
		err = h(call{ctx: ctx, r: r, id: id, api: api, input: in}, st)
		if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) && r.Context().Err() == nil {
			err = rpcErr("deadline_exceeded", "the call's timeout (Connect-Timeout-Ms) passed")
		}
		end(err)
	}
}

// readEnvelope reads the one message of a server stream's request.
func readEnvelope(body io.Reader) (json.RawMessage, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(body, hdr[:]); err != nil {
		return nil, bodyErr(err, "the request is not an enveloped message")
	}
	if hdr[0]&flagCompressed != 0 {
		return nil, rpcErr("unimplemented", "compressed messages are not supported")
	}
	if hdr[0] != 0 {
		return nil, rpcErr("invalid_argument", "the request's envelope has flags %#x, not a message", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return nil, rpcErr("resource_exhausted", "the request message is %d bytes, more than %d", n, maxMessage)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, bodyErr(err, "the request message is cut short")
	}
	return b, nil
}

// bodyErr is the error of a request body that could not be read: too slow for the listener's
// bounds (deadline_exceeded, naming the setting), or not what it says (invalid_argument).
func bodyErr(err error, what string) *rpcError {
	if errors.Is(err, slots.ErrSlowBody) {
		return rpcErr("deadline_exceeded", "%v", err)
	}
	return rpcErr("invalid_argument", "%s: %v", what, err)
}

// unimplemented answers a method the SDK never calls, or that airlock does not serve.
func unimplemented(why string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		e := rpcErr("unimplemented", "%s", why)
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
			w.Header().Set("Content-Type", "application/connect+json")
			st := &stream{w: w, rc: http.NewResponseController(w)}
			st.envelope(flagEndStream, map[string]any{"error": e.body()})
			return
		}
		writeJSON(w, rpcStatus(e.code), e.body())
	}
}
