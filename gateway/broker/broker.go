package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/airlock-dev/airlock/scope"
)

// Errors a credential request can end in.
var (
	// ErrNotAllowed: the catalog does not let this credential go to this host or tenant.
	ErrNotAllowed = errors.New("credential not allowed here")
	// ErrUnavailable: the source (Vault) cannot provide the value now; the request is refused
	// with 503.
	ErrUnavailable = errors.New("credential source unavailable")
	// ErrCleartext: the request would carry the credential without TLS, which its entry does
	// not allow.
	ErrCleartext = errors.New("credential not sent in clear text")
)

// SourceKind names where a credential's value comes from.
type SourceKind string

// Source kinds.
const (
	SourceKV SourceKind = "kv" // a KV v2 secret, cached with a TTL
	// SourceToken is a Vault token minted per lease from a token role, with the entry's
	// policies and a TTL no longer than the lease, revoked when the lease ends.
	SourceToken SourceKind = "token"
	// SourcePKI is a client certificate issued per lease from a PKI role (for mTLS upstreams),
	// revoked when the lease ends.
	SourcePKI SourceKind = "pki"
	// SourceOIDC is a signed identity token from Vault's OIDC provider for a named role (a JWT
	// for upstreams that trust Vault as an issuer), cached until shortly before it expires.
	SourceOIDC SourceKind = "oidc"
	// SourceDynamic reads, per lease, any Vault path that returns a lease (database, AWS, ...),
	// renews it while the task lives and revokes it when the lease ends. Its data fields (for
	// example username and password) are the secret's fields.
	SourceDynamic SourceKind = "dynamic"
)

// Source says where a credential's value lives.
type Source struct {
	Kind  SourceKind    `yaml:"kind"`
	Mount string        `yaml:"mount"` // KV v2 mount; empty means "secret"
	Path  string        `yaml:"path"`  // secret path under the mount
	TTL   time.Duration `yaml:"ttl"`   // kv: cache lifetime (default 5m); token: lifetime cap (default 1h)
	// Role and Policies are for the token source: the token role minted from (the operator
	// makes it orphan, so a task's token does not die with the gateway's own) and the policies
	// the task's token gets (within the role's allowed policies).
	Role     string   `yaml:"role"`
	Policies []string `yaml:"policies"`
}

// InjectKind names how a credential is put into a request.
type InjectKind string

// Injection kinds.
const (
	InjectHeader InjectKind = "header" // Header: Template rendered with the secret's fields
	InjectBasic  InjectKind = "basic"  // basic auth from the fields "username" and "password"
	InjectQuery  InjectKind = "query"  // query parameter Param: Template
	// InjectClientCert presents the secret's "certificate" and "private_key" as the client
	// certificate of the TLS connection to the upstream.
	InjectClientCert InjectKind = "client-cert"
	// InjectSigV4 re-signs the request with AWS Signature Version 4, with the secret's
	// "access_key_id", "secret_access_key" and optional "session_token".
	InjectSigV4 InjectKind = "sigv4"
)

// DefaultSignBodyCap is the largest request body hashed for a SigV4 signature when the entry
// does not sign with UNSIGNED-PAYLOAD.
const DefaultSignBodyCap = 10 << 20

// Injection says how a credential is put into a request.
type Injection struct {
	Kind     InjectKind `yaml:"kind"`
	Header   string     `yaml:"header"`
	Param    string     `yaml:"param"`
	Template string     `yaml:"template"` // e.g. "Bearer {{.token}}"
	// SigV4: the region and service signed for; UnsignedPayload signs with UNSIGNED-PAYLOAD
	// (for services that accept it, such as S3), else the body is hashed, up to MaxBody bytes
	// (default DefaultSignBodyCap), and larger bodies are refused.
	Region          string `yaml:"region"`
	Service         string `yaml:"service"`
	UnsignedPayload bool   `yaml:"unsigned_payload"`
	MaxBody         int64  `yaml:"max_body"`

	tmpl *template.Template
}

// Entry is one credential the operator offers.
type Entry struct {
	Name   string    `yaml:"name"`
	Source Source    `yaml:"source"`
	Inject Injection `yaml:"inject"`
	// Hosts the credential may ever be sent to (exact or "*." patterns); a token cannot widen it.
	Hosts []string `yaml:"hosts"`
	// Tenants that may use it; empty means every tenant.
	Tenants []string `yaml:"tenants"`
	// PlainHTTPPorts are the ports on which the credential may be sent over plain HTTP. By
	// default it is injected only into requests that go upstream over TLS: anything on the
	// path of a clear-text request could read it.
	PlainHTTPPorts []int `yaml:"plain_http_ports"`

	hosts scope.Set
}

// Secret is a credential's fields (for example "token", or "username" and "password"). Its
// values must never reach a log, audit record, error or the sandbox.
type Secret map[string]string

// Values returns the secret's values, for response scrubbing.
func (s Secret) Values() []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Lease is the lease a credential is asked for: per-task material is minted for its ID, with a
// lifetime no longer than what is left of it.
type Lease struct {
	ID string
	// Tenant and Task say whose lease it is, for the records of what is minted and revoked.
	Tenant, Task string
	// Expires caps the lifetime of what is minted for the lease; zero means no cap.
	Expires time.Time
}

// Lifetime returns ttl, shortened to what is left of the lease, in whole seconds rounded up, so
// that what is minted near the lease's end lives to the end and not past the next second.
func (l Lease) Lifetime(ttl time.Duration) time.Duration {
	if l.Expires.IsZero() {
		return ttl
	}
	if left := time.Until(l.Expires); left < ttl {
		return max((left+time.Second-1)/time.Second*time.Second, time.Second)
	}
	return ttl
}

// Broker fetches credential values. Implementations must be safe for concurrent use.
type Broker interface {
	// Get returns e's value for lease: shared for static sources, minted for the lease (on
	// first use) for per-task ones.
	Get(ctx context.Context, lease Lease, e *Entry) (Secret, error)
	// Release revokes everything minted for lease; the pool calls it when the lease ends.
	Release(ctx context.Context, lease string) error
}

// Catalog is the operator's set of credentials, by name.
type Catalog map[string]*Entry

// NewCatalog validates entries and indexes them by name; errors name the entry and field.
func NewCatalog(entries []Entry) (Catalog, error) {
	c := Catalog{}
	for i := range entries {
		e := entries[i]
		where := fmt.Sprintf("credentials[%d]", i)
		if e.Name == "" {
			return nil, fmt.Errorf("%s.name: required", where)
		}
		where = fmt.Sprintf("credentials[%d] (%s)", i, e.Name)
		if _, dup := c[e.Name]; dup {
			return nil, fmt.Errorf("%s.name: duplicate", where)
		}
		switch e.Source.Kind {
		case SourceKV:
			if e.Source.Path == "" {
				return nil, fmt.Errorf("%s.source.path: required", where)
			}
			if e.Source.Mount == "" {
				e.Source.Mount = "secret"
			}
			if e.Source.TTL == 0 {
				e.Source.TTL = 5 * time.Minute
			}
		case SourcePKI:
			if e.Source.Role == "" {
				return nil, fmt.Errorf("%s.source.role: required (a PKI role)", where)
			}
			if e.Source.Mount == "" {
				e.Source.Mount = "pki"
			}
			if e.Source.TTL == 0 {
				e.Source.TTL = time.Hour
			}
		case SourceDynamic:
			if e.Source.Path == "" {
				return nil, fmt.Errorf("%s.source.path: required (for example database/creds/ROLE)", where)
			}
		case SourceOIDC:
			if e.Source.Role == "" {
				return nil, fmt.Errorf("%s.source.role: required (a Vault identity OIDC role)", where)
			}
		case SourceToken:
			if e.Source.Role == "" {
				return nil, fmt.Errorf("%s.source.role: required (an orphan token role)", where)
			}
			if len(e.Source.Policies) == 0 {
				return nil, fmt.Errorf("%s.source.policies: at least one policy is required", where)
			}
			if e.Source.TTL == 0 {
				e.Source.TTL = time.Hour
			}
		default:
			return nil, fmt.Errorf("%s.source.kind: %q is not supported (kv, dynamic, token, pki, oidc)", where, e.Source.Kind)
		}
		switch e.Inject.Kind {
		case InjectHeader:
			if e.Inject.Header == "" {
				return nil, fmt.Errorf("%s.inject.header: required", where)
			}
		case InjectQuery:
			if e.Inject.Param == "" {
				return nil, fmt.Errorf("%s.inject.param: required", where)
			}
		case InjectBasic, InjectClientCert:
		case InjectSigV4:
			if e.Inject.Region == "" || e.Inject.Service == "" {
				return nil, fmt.Errorf("%s.inject: sigv4 needs region and service", where)
			}
			if e.Inject.MaxBody == 0 {
				e.Inject.MaxBody = DefaultSignBodyCap
			}
		default:
			return nil, fmt.Errorf("%s.inject.kind: %q is not one of header, basic, query, client-cert, sigv4", where, e.Inject.Kind)
		}
		if (e.Source.Kind == SourcePKI) != (e.Inject.Kind == InjectClientCert) {
			return nil, fmt.Errorf("%s.inject.kind: client-cert goes with source kind pki, and only with it", where)
		}
		if e.Inject.Kind == InjectHeader || e.Inject.Kind == InjectQuery {
			if e.Inject.Template == "" {
				return nil, fmt.Errorf("%s.inject.template: required", where)
			}
			t, err := template.New(e.Name).Option("missingkey=error").Parse(e.Inject.Template)
			if err != nil {
				return nil, fmt.Errorf("%s.inject.template: %v", where, err)
			}
			e.Inject.tmpl = t
		}
		if len(e.Hosts) == 0 {
			return nil, fmt.Errorf("%s.hosts: at least one host is required", where)
		}
		for _, p := range e.PlainHTTPPorts {
			if p < 1 || p > 65535 {
				return nil, fmt.Errorf("%s.plain_http_ports: %d is not a port", where, p)
			}
		}
		if len(e.PlainHTTPPorts) > 0 && e.Inject.Kind == InjectClientCert {
			return nil, fmt.Errorf("%s.plain_http_ports: a client certificate is presented only over TLS", where)
		}
		hs := make([]scope.Scope, len(e.Hosts))
		for j, h := range e.Hosts {
			hs[j] = scope.Scope{Host: h}
		}
		set, err := scope.Parse(hs)
		if err != nil {
			return nil, fmt.Errorf("%s.hosts: %v", where, err)
		}
		e.hosts = set
		c[e.Name] = &e
	}
	return c, nil
}

// Authorize returns the entry name may use for host and tenant, or an error wrapping
// ErrNotAllowed that says why. host must be canonical.
func (c Catalog) Authorize(name, host, tenant string) (*Entry, error) {
	e, ok := c[name]
	if !ok {
		return nil, fmt.Errorf("%w: credential %q is not in the catalog", ErrNotAllowed, name)
	}
	if _, ok := e.hosts.AllowsName(host); !ok {
		return nil, fmt.Errorf("%w: credential %q may not be sent to %s", ErrNotAllowed, name, host)
	}
	if len(e.Tenants) > 0 && !slices.Contains(e.Tenants, tenant) {
		return nil, fmt.Errorf("%w: tenant %q may not use credential %q", ErrNotAllowed, tenant, name)
	}
	return e, nil
}

// CheckTransport refuses, with an error wrapping ErrCleartext, a request that would carry e's
// value upstream without TLS ("http" to a port the entry does not list in PlainHTTPPorts).
func (e *Entry) CheckTransport(scheme string, port int) error {
	if scheme == "https" || slices.Contains(e.PlainHTTPPorts, port) {
		return nil
	}
	return fmt.Errorf("%w: credential %q goes only over TLS, and this request is plain %s to port %d",
		ErrCleartext, e.Name, scheme, port)
}

// Apply puts s into r as e says, first removing whatever the sandbox sent in its place. It
// returns the values it wrote into the request (whole header values, the user:password of basic
// auth, the query value), so that responses can be scrubbed of them as well as of s's values.
func (e *Entry) Apply(r *http.Request, s Secret) ([]string, error) {
	render := func() (string, error) {
		var b bytes.Buffer
		if err := e.Inject.tmpl.Execute(&b, map[string]string(s)); err != nil {
			// The template error may quote the data; say only which credential failed.
			return "", fmt.Errorf("credential %q: secret lacks a field its template uses", e.Name)
		}
		return b.String(), nil
	}
	switch e.Inject.Kind {
	case InjectHeader:
		v, err := render()
		if err != nil {
			return nil, err
		}
		r.Header.Del(e.Inject.Header)
		r.Header.Set(e.Inject.Header, v)
		return []string{v}, nil
	case InjectBasic:
		u, p := s["username"], s["password"]
		if u == "" && p == "" {
			return nil, fmt.Errorf("credential %q: secret has no username or password", e.Name)
		}
		v := "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))
		r.Header.Del("Authorization")
		r.Header.Set("Authorization", v)
		return []string{v, u + ":" + p}, nil
	case InjectQuery:
		v, err := render()
		if err != nil {
			return nil, err
		}
		q := r.URL.Query()
		q.Del(e.Inject.Param)
		q.Set(e.Inject.Param, v)
		r.URL.RawQuery = q.Encode()
		return []string{v}, nil
	case InjectClientCert:
		// Presented in the upstream TLS handshake by the gateway's transport, not in the request.
		return nil, nil
	case InjectSigV4:
		if err := e.signV4(r, s); err != nil {
			return nil, err
		}
		return []string{r.Header.Get("Authorization")}, nil
	}
	return nil, nil
}

// signV4 signs r for the entry's region and service, replacing whatever signature headers the
// sandbox sent. The body must already be bounded (the gateway refuses bodies over MaxBody).
func (e *Entry) signV4(r *http.Request, s Secret) error {
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
		r.Header.Del(h)
	}
	hash := v4UnsignedPayload
	if !e.Inject.UnsignedPayload {
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			var err error
			if body, err = io.ReadAll(io.LimitReader(r.Body, e.Inject.MaxBody+1)); err != nil {
				return fmt.Errorf("credential %q: reading the body to sign: %w", e.Name, err)
			}
			r.Body.Close()
			if int64(len(body)) > e.Inject.MaxBody {
				return fmt.Errorf("credential %q: body over the %d-byte signing cap", e.Name, e.Inject.MaxBody)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	}
	r.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: s["access_key_id"], SecretAccessKey: s["secret_access_key"], SessionToken: s["session_token"]}
	if creds.AccessKeyID == "" || creds.SecretAccessKey == "" {
		return fmt.Errorf("credential %q: secret lacks access_key_id or secret_access_key", e.Name)
	}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, r, hash, e.Inject.Service, e.Inject.Region, time.Now()); err != nil {
		return fmt.Errorf("credential %q: signing: %w", e.Name, err)
	}
	return nil
}

const v4UnsignedPayload = "UNSIGNED-PAYLOAD"

// ClientCertificate returns the TLS certificate in s, for InjectClientCert entries.
func (s Secret) ClientCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair([]byte(s["certificate"]), []byte(s["private_key"]))
	if err != nil {
		return tls.Certificate{}, errors.New("secret holds no usable certificate and private key")
	}
	return c, nil
}

// Redact replaces every secret value in text with "[redacted]"; the one step every log line and
// error that might carry upstream text goes through.
func Redact(text string, secrets ...string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	return text
}
