package review

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/slots"
)

// maxSessions bounds the sessions held; beyond it the identity holding the most loses the one
// of its sessions closest to expiry, so signing in again and again ends only one's own sessions,
// never a reviewer's.
const maxSessions = 10000

// session is one signed-in browser.
type session struct {
	// Who names the identity: the reviewer key's name, or "tenant:T" for an API key.
	Who      string
	Reviewer bool
	// Tenants are the tenants it reads; All: every one.
	Tenants []string
	All     bool
	// CSRF is the token every form of the session carries back.
	CSRF string
	// keyHash is the hex SHA-256 of the key signed in with.
	keyHash string
	expires time.Time
	// done is closed when the session ends (sign-out, or the node dropping it), so what it
	// holds open (a live tail, an export) ends with it.
	done    chan struct{}
	endOnce sync.Once
}

// end ends the session's streams; safe to call more than once.
func (s *session) end() { s.endOnce.Do(func() { close(s.done) }) }

// tenant returns the tenant a view of the session reads, given the one the request names: a
// tenant's key reads its own; a reviewer spanning every tenant reads the one named or all of
// them (""); a reviewer of some tenants reads one of them at a time (the first when none is
// named).
func (s *session) tenant(asked string) (string, error) {
	switch {
	case s.All:
		return asked, nil
	case asked == "":
		return s.Tenants[0], nil
	case slices.Contains(s.Tenants, asked):
		return asked, nil
	}
	return "", fmt.Errorf("%s does not read tenant %q (it reads %s)", s.Who, asked, strings.Join(s.Tenants, ", "))
}

// sees reports whether the session may read a record or lease of tenant t.
func (s *session) sees(t string) bool { return s.All || slices.Contains(s.Tenants, t) }

type sessions struct {
	mu  sync.Mutex
	m   map[string]*session // by the SHA-256 of the cookie's value
	ttl time.Duration
	now func() time.Time
	max int // maxSessions; tests set fewer
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, ttl: ttl, now: now, max: maxSessions}
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func tokenHash(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:])
}

// start makes a session and returns the cookie value that names it.
func (ss *sessions) start(s *session) string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	held := map[string]int{} // sessions per identity
	for k, v := range ss.m {
		if now.After(v.expires) {
			delete(ss.m, k)
			v.end()
		} else {
			held[v.Who]++
		}
	}
	held[s.Who]++ // the new one counts for its identity
	for len(ss.m) >= ss.max {
		// The identity holding the most loses one; among equals, the one signing in, then the
		// session closest to expiry.
		var victim string
		for k, v := range ss.m {
			if victim == "" {
				victim = k
				continue
			}
			w := ss.m[victim]
			switch a, b := held[v.Who], held[w.Who]; {
			case a != b:
				if a > b {
					victim = k
				}
			case (v.Who == s.Who) != (w.Who == s.Who):
				if v.Who == s.Who {
					victim = k
				}
			case v.expires.Before(w.expires):
				victim = k
			}
		}
		held[ss.m[victim].Who]--
		ss.m[victim].end()
		delete(ss.m, victim)
	}
	s.CSRF, s.expires, s.done = randomToken(), now.Add(ss.ttl), make(chan struct{})
	v := randomToken()
	ss.m[tokenHash(v)] = s
	return v
}

// live reports whether s has neither ended nor expired.
func (ss *sessions) live(s *session) bool {
	select {
	case <-s.done:
		return false
	default:
	}
	return !ss.now().After(s.expires)
}

func (ss *sessions) get(v string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[tokenHash(v)]
	if s == nil || ss.now().After(s.expires) {
		return nil
	}
	return s
}

func (ss *sessions) end(v string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if s := ss.m[tokenHash(v)]; s != nil {
		s.end()
		delete(ss.m, tokenHash(v))
	}
}

// Cookie names: a TLS page's session cookie carries the __Host- prefix, so no other host or
// path can set or shadow it.
func (s *Server) cookieName() string {
	if s.cfg.Secure {
		return "__Host-airlock-review"
	}
	return "airlock-review"
}

const signinCookie = "airlock-review-signin"

func (s *Server) setCookie(w http.ResponseWriter, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: s.cfg.Secure, SameSite: http.SameSiteStrictMode})
}

type sessionKey struct{}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

// session requires a signed-in browser: a page asked for without one sends it to sign in and
// back; anything else is refused. A page or form (k call) holds a call slot of the session's
// identity until it is served, taken before its form is read, so a slow form holds one too. A
// POST must carry the session's CSRF token and come from this page.
func (s *Server) session(k kind, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var sess *session
		if c, err := r.Cookie(s.cookieName()); err == nil {
			sess = s.sessions.get(c.Value)
		}
		if sess == nil {
			if r.Method == http.MethodGet && r.URL.Path != "/tail/events" {
				http.Redirect(w, r, "/signin?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.fail(w, r, http.StatusUnauthorized, "sign in first: this session has ended or never began")
			return
		}
		if k == call {
			release, ok := s.hold(w, r, sess, s.calls, "review.calls", "pages and forms in progress")
			if !ok {
				return
			}
			defer release()
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !s.formRead(w, r) {
				return
			}
			if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(sess.CSRF)) != 1 {
				s.fail(w, r, http.StatusForbidden, "the form did not come from this page (its CSRF token or origin is wrong); reload the page and try again")
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	}
}

// formRead reads r's form, answering 408 naming the setting when its body came too slowly
// (package slots) and reporting false. Any other problem leaves the form empty, which the
// form's token check then refuses.
func (s *Server) formRead(w http.ResponseWriter, r *http.Request) bool {
	if err := r.ParseForm(); errors.Is(err, slots.ErrSlowBody) {
		s.fail(w, r, http.StatusRequestTimeout, "the form did not come in time: "+err.Error())
		return false
	}
	return true
}

func (s *Server) signinPage(w http.ResponseWriter, r *http.Request) {
	tok := randomToken()
	s.setCookie(w, signinCookie, tok, 600)
	s.render(w, "signin.html", map[string]any{"CSRF": tok, "Next": safeNext(r.URL.Query().Get("next")), "Error": ""})
}

// signin exchanges a reviewer key or an API key for a session. The form carries the token of
// the cookie the sign-in page set, so another site cannot sign a browser in as someone else.
func (s *Server) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !s.formRead(w, r) {
		return
	}
	next := safeNext(r.PostFormValue("next"))
	c, err := r.Cookie(signinCookie)
	switch {
	case !sameOrigin(r):
		s.fail(w, r, http.StatusForbidden, "the sign-in form was posted from another origin; open /signin on this page and try again")
		return
	case err != nil || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.Value)) != 1:
		s.fail(w, r, http.StatusForbidden, "the sign-in form's token does not match its cookie (an old or forged form); open /signin and try again")
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	if !s.signins.Allow(host) {
		w.Header().Set("Retry-After", "1")
		s.fail(w, r, http.StatusTooManyRequests, "too many sign-in attempts from this address; wait a second")
		return
	}
	hash := tokenHash(strings.TrimSpace(r.PostFormValue("key")))
	var sess *session
	if rv, ok := s.cfg.Reviewers[hash]; ok {
		sess = &session{Who: rv.Name, Reviewer: true, Tenants: rv.Tenants, All: rv.Everyone(), keyHash: hash}
	} else if t, ok := s.cfg.Keys[hash]; ok {
		sess = &session{Who: "tenant:" + t, Tenants: []string{t}, keyHash: hash}
	}
	if sess == nil {
		tok := randomToken()
		s.setCookie(w, signinCookie, tok, 600)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		s.pages.ExecuteTemplate(w, "signin.html", map[string]any{"CSRF": tok, "Next": next,
			"Error": "that key is neither a reviewer key nor an API key of this node"})
		return
	}
	s.setCookie(w, signinCookie, "", -1)
	s.setCookie(w, s.cookieName(), s.sessions.start(sess), int(s.cfg.SessionTTL/time.Second))
	s.cfg.Logger.Info("review sign-in", "who", sess.Who)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) signout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(s.cookieName()); err == nil {
		s.sessions.end(c.Value)
	}
	s.setCookie(w, s.cookieName(), "", -1)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// safeNext keeps a redirect after sign-in on this page: a path, never another origin. "//x" and
// anything with a scheme are refused, and so are a backslash (browsers read it as "/") and any
// control character (they drop tabs and newlines, so "/\t/x" would become "//x").
func safeNext(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.ContainsRune(p, '\\') ||
		strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/"
	}
	return p
}
