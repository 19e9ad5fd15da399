package pool

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/airlock-dev/airlock/pool/inside"
)

// MaxEnv bounds how many variables one template, lease or command sets.
const MaxEnv = 256

// CheckEnv is the one check of every variable a sandbox is given, from a template, a lease or
// a command: a name, not one airlock sets itself (the proxies, the trust stores, HOME, the
// process marker), and no secret, by its name (GITHUB_TOKEN, DB_PASSWORD, AWS_SECRET_ACCESS_KEY)
// or by its value (a private key, a JWT, a token in a well-known provider's format). Secrets
// stay out of sandboxes: a task asks for a credential by catalog name and the gateway injects
// it. The error names the variable (never its value) and says why.
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnv {
		return fmt.Errorf("%w: %d environment variables, more than the %d allowed", ErrBadRequest, len(env), MaxEnv)
	}
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if why := envRefusal(k, env[k]); why != "" {
			return fmt.Errorf("%w: environment variable %s %s", ErrBadRequest, k, why)
		}
	}
	return nil
}

// envRefusal says why a sandbox may not be given k=v, or "" when it may.
func envRefusal(k, v string) string {
	if !envName.MatchString(k) || len(k) > 256 {
		return "is not a variable name (letters, digits and _, not first a digit)"
	}
	if len(v) > 32<<10 {
		return "is longer than 32 KiB"
	}
	if strings.ContainsRune(v, 0) {
		return "holds a NUL byte"
	}
	u := strings.ToUpper(k)
	if airlockSets[u] || strings.Contains(u, "PROXY") || strings.HasSuffix(u, "CA_BUNDLE") || u == "SSL_CERT_DIR" ||
		strings.HasPrefix(u, "AIRLOCK_") {
		return "is set by airlock and cannot be overridden"
	}
	if secretName(k) {
		return "names a secret, and secrets never enter a sandbox: ask for a credential by its catalog name in the task's scopes, and the gateway injects it into the requests it allows"
	}
	if what := secretValue(v); what != "" {
		return "holds what looks like " + what + ", and secrets never enter a sandbox: ask for a credential by its catalog name in the task's scopes, and the gateway injects it into the requests it allows"
	}
	return ""
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// airlockSets holds the names (upper case) of every variable a sandbox starts with, from the
// one list that sets them: the proxies, the trust stores of every client, HOME.
var airlockSets = func() map[string]bool {
	m := map[string]bool{}
	for _, kv := range inside.Env("http://proxy:1", "/") {
		k, _, _ := strings.Cut(kv, "=")
		m[strings.ToUpper(k)] = true
	}
	return m
}()

// secretWords are the words of a variable name (split at _ and at a lower-to-upper change, so
// dbPassword is DB PASSWORD) that say it holds a secret, also as a word's end (PGPASSWORD,
// AUTHTOKEN; but not TOKENS, a count in MAX_TOKENS); secretParts say so only as the last
// word of a longer name (GITHUB_PAT, MYSQL_PWD, SMTP_PASS, but not PATH, COMPASS or PWD
// itself); secretPairs are adjacent words that do (API_KEY, but not KEYBOARD or MONKEY_PATCH).
var (
	secretWords = []string{"SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE",
		"APIKEY", "CREDENTIAL", "CREDENTIALS", "PRIVATEKEY", "ACCESSKEY", "AUTHKEY", "SECRETKEY"}
	secretParts = []string{"PAT", "PWD", "PASS", "PSK"}
	secretPairs = [][2]string{{"API", "KEY"}, {"ACCESS", "KEY"}, {"PRIVATE", "KEY"}, {"SECRET", "KEY"}, {"AUTH", "KEY"},
		{"SIGNING", "KEY"}, {"ENCRYPTION", "KEY"}, {"CLIENT", "KEY"}, {"DEPLOY", "KEY"}, {"SSH", "KEY"}, {"MASTER", "KEY"},
		{"LICENSE", "KEY"}, {"SESSION", "KEY"}, {"WEBHOOK", "SECRET"}, {"COOKIE", "SECRET"}}
)

func secretName(k string) bool {
	parts := nameWords(k)
	for i, p := range parts {
		for _, w := range secretWords {
			if strings.HasSuffix(p, w) {
				return true
			}
		}
		if i > 0 && i == len(parts)-1 && slices.Contains(secretParts, p) {
			return true
		}
		if i > 0 && slices.Contains(secretPairs, [2]string{parts[i-1], p}) {
			return true
		}
	}
	return false
}

// nameWords splits a variable name into upper-case words at each _ and where a lower-case
// letter or a digit is followed by an upper-case one.
func nameWords(k string) []string {
	var words []string
	var w strings.Builder
	prev := rune(0)
	for _, r := range k {
		switch {
		case r == '_':
			words, prev = append(words, w.String()), r
			w.Reset()
			continue
		case unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)):
			words = append(words, w.String())
			w.Reset()
		}
		w.WriteRune(unicode.ToUpper(r))
		prev = r
	}
	return append(words, w.String())
}

// secretValues are the shapes of well-known credentials, each with what it is called.
var secretValues = []struct {
	what string
	re   *regexp.Regexp
}{
	{"a private key", regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----`)},
	{"a JWT", regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)},
	{"a GitHub token", regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})`)},
	{"a GitLab token", regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}`)},
	{"an AWS access key", regexp.MustCompile(`\b(AKIA|ASIA)[A-Z0-9]{16}\b`)},
	{"a Google API key", regexp.MustCompile(`\bAIza[A-Za-z0-9_-]{35}`)},
	{"a Slack token", regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`)},
	{"an API secret key", regexp.MustCompile(`\b(sk|rk)[-_](live_|test_|proj-|ant-)?[A-Za-z0-9_-]{20,}`)},
	{"a Vault token", regexp.MustCompile(`\bhv[sbr]\.[A-Za-z0-9_-]{20,}`)},
	{"a Hugging Face token", regexp.MustCompile(`\bhf_[A-Za-z0-9]{30,}`)},
	{"an npm token", regexp.MustCompile(`\bnpm_[A-Za-z0-9]{36}\b`)},
	{"a PyPI token", regexp.MustCompile(`\bpypi-AgE[A-Za-z0-9_-]{40,}`)},
	{"a Docker Hub token", regexp.MustCompile(`\bdckr_pat_[A-Za-z0-9_-]{20,}`)},
	{"a Google OAuth token", regexp.MustCompile(`\bya29\.[A-Za-z0-9_-]{20,}`)},
	{"a bearer credential", regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{16,}`)},
	{"a URL with a password", regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`)},
}

func secretValue(v string) string {
	if len(v) < 16 {
		return ""
	}
	for _, s := range secretValues {
		if s.re.MatchString(v) {
			return s.what
		}
	}
	return ""
}

// commandEnv is what a command of l runs with: the lease's variables under the command's own,
// each of which CheckEnv passes.
func commandEnv(l Lease, env map[string]string) (map[string]string, error) {
	if err := CheckEnv(env); err != nil {
		return nil, err
	}
	if len(l.Env) == 0 {
		return env, nil
	}
	out := make(map[string]string, len(l.Env)+len(env))
	for k, v := range l.Env {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
	}
	return out, nil
}

// Metadata bounds: a lease's labels are the tenant's own, kept with it in the store.
const (
	MaxMetadata      = 64
	MaxMetadataKey   = 128
	MaxMetadataValue = 1024
)

// CheckMetadata refuses labels beyond the bounds above, naming the one at fault.
func CheckMetadata(md map[string]string) error {
	if len(md) > MaxMetadata {
		return fmt.Errorf("%w: %d metadata entries, more than the %d allowed", ErrBadRequest, len(md), MaxMetadata)
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > MaxMetadataKey:
			return fmt.Errorf("%w: metadata key %q is empty or longer than %d bytes", ErrBadRequest, k, MaxMetadataKey)
		case len(v) > MaxMetadataValue:
			return fmt.Errorf("%w: metadata %s is longer than %d bytes", ErrBadRequest, k, MaxMetadataValue)
		}
	}
	return nil
}
