package pool_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/internal/pooltest"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/scope"
)

// TestProcessInput: a background process started with stdin reads what is sent, in order, and
// then the end once its input is closed; one without takes none; a terminal's is resized; and
// the lease's variables reach it under its own.
func TestProcessInput(t *testing.T) {
	var mu sync.Mutex
	var sizes []pool.TermSize
	var envs []map[string]string
	resized := make(chan struct{}) // closed once the terminal's resizes end, with it
	exec := func(ctx context.Context, _ pool.Sandbox, req pool.ExecRequest, stdin io.Reader, stdout, _ io.Writer) (int, error) {
		mu.Lock()
		envs = append(envs, req.Env)
		mu.Unlock()
		if req.Cmd[0] == "sh" {
			return 0, nil
		}
		if req.TTY {
			go func() {
				defer close(resized)
				for sz := range req.Resize {
					mu.Lock()
					sizes = append(sizes, sz)
					mu.Unlock()
				}
			}()
		}
		if stdin == nil {
			return 9, nil
		}
		io.Copy(stdout, stdin) // until the input ends
		return 0, nil
	}
	e := pooltest.NewEnv(t, pooltest.EnvConfig{Templates: []pool.Template{{MinWarm: 1, MaxTotal: 2}},
		Runtime: func(rt *pooltest.Runtime) { rt.ExecFunc = exec }})
	e.MustWarm(t, 1)
	ctx := context.Background()
	tok, _ := e.Issuer.Mint("task-input", "acme", []scope.Scope{{Host: "a.example"}}, time.Minute)
	l, err := e.Manager.Lease(ctx, pool.LeaseRequest{Tenant: "acme", Template: "default", Token: tok,
		Env: map[string]string{"LEASE": "1", "BOTH": "lease"}})
	if err != nil {
		t.Fatal(err)
	}

	p, err := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"cat"}, Stdin: true, Env: map[string]string{"BOTH": "command"}})
	if err != nil || !p.Stdin {
		t.Fatalf("start: %+v %v", p, err)
	}
	for _, s := range []string{"one ", "two ", "three"} {
		if err := e.Manager.ProcessInput(ctx, "acme", l.ID, p.ID, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Manager.ProcessInput(ctx, "acme", l.ID, p.ID, make([]byte, pool.MaxProcessInput+1)); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("more input than is held: %v", err)
	}
	if err := e.Manager.ProcessInput(ctx, "globex", l.ID, p.ID, []byte("x")); !errors.Is(err, pool.ErrLeaseNotFound) {
		t.Errorf("another tenant's input: %v", err)
	}
	if err := e.Manager.CloseProcessInput(ctx, "acme", l.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.ProcessInput(ctx, "acme", l.ID, p.ID, []byte("late")); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("input after the close: %v", err)
	}
	w, _ := e.Manager.WaitProcess(ctx, "acme", l.ID, p.ID, 5*time.Second)
	o, _ := e.Manager.ProcessOutput(ctx, "acme", l.ID, p.ID, 0, 0, 0, 0)
	if w.Running || w.ExitCode == nil || *w.ExitCode != 0 || string(o.Stdout) != "one two three" {
		t.Fatalf("cat ended %+v with %q", w, o.Stdout)
	}
	mu.Lock()
	env := envs[len(envs)-1]
	mu.Unlock()
	if env["LEASE"] != "1" || env["BOTH"] != "command" {
		t.Errorf("the command ran with %v: want the lease's variables under its own", env)
	}

	q, _ := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"cat"}})
	if err := e.Manager.ProcessInput(ctx, "acme", l.ID, q.ID, []byte("x")); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("input to a process without stdin: %v", err)
	}
	if err := e.Manager.ResizeProcess(ctx, "acme", l.ID, q.ID, pool.TermSize{Rows: 10, Cols: 10}); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("resizing a process with no terminal: %v", err)
	}

	tty, err := e.Manager.StartProcess(ctx, "acme", l.ID, pool.ExecRequest{Cmd: []string{"bash"}, TTY: true, Size: pool.TermSize{Rows: 24, Cols: 80}})
	if err != nil || !tty.TTY || !tty.Stdin {
		t.Fatalf("a terminal: %+v %v", tty, err)
	}
	if err := e.Manager.ResizeProcess(ctx, "acme", l.ID, tty.ID, pool.TermSize{Rows: 50, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	if err := e.Manager.ProcessInput(ctx, "acme", l.ID, tty.ID, []byte("exit\n")); err != nil {
		t.Fatal(err)
	}
	e.Manager.CloseProcessInput(ctx, "acme", l.ID, tty.ID)
	e.Manager.WaitProcess(ctx, "acme", l.ID, tty.ID, 5*time.Second)
	select {
	case <-resized:
	case <-time.After(5 * time.Second):
		t.Fatal("gave up after 5s waiting for the ended terminal's resizes to end")
	}
	mu.Lock()
	got := append([]pool.TermSize(nil), sizes...)
	mu.Unlock()
	if len(got) != 1 || got[0] != (pool.TermSize{Rows: 50, Cols: 120}) {
		t.Errorf("the terminal was resized to %v", got)
	}
	if err := e.Manager.ResizeProcess(ctx, "acme", l.ID, tty.ID, pool.TermSize{Rows: 5, Cols: 5}); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("resizing an ended terminal: %v", err)
	}
}

// TestCheckEnv: the one check every variable a sandbox is given passes, attacked by name, by
// value and by what airlock sets itself; the error names the variable, never its value.
func TestCheckEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string // "" passes
	}{
		{"plain", map[string]string{"LANG": "C.UTF-8", "TOKENIZERS_PARALLELISM": "false", "KEYBOARD": "us", "PATH_EXTRA": "/opt/bin",
			"PWD": "/workspace", "OLDPWD": "/", "PASSTHROUGH": "1", "MAX_TOKENS_OUT": "5", "tokenizerName": "bpe", "PATTERN": "x",
			"COMPASS_URL": "http://compass.example", "AUTH_URL": "https://login.example", "NODE_OPTIONS": "--max-old-space-size=4096",
			"SENTRY_ENVIRONMENT": "dev", "npm_config_loglevel": "warn", "OTP_VERSION": "27.1", "PASS_COUNT": "2"}, ""},
		{"a password as a word's end", map[string]string{"PGPASSWORD": "x"}, "PGPASSWORD names a secret"},
		{"a token as a word's end", map[string]string{"NPM_CONFIG__AUTHTOKEN": "x"}, "names a secret"},
		{"camel case", map[string]string{"githubToken": "x"}, "githubToken names a secret"},
		{"camel case pair", map[string]string{"openaiApiKey": "x"}, "names a secret"},
		{"a personal access token", map[string]string{"GITHUB_PAT": "x"}, "names a secret"},
		{"a password by a short word", map[string]string{"MYSQL_PWD": "x"}, "names a secret"},
		{"a webhook secret", map[string]string{"STRIPE_WEBHOOK_SECRET": "x"}, "names a secret"},
		{"a Hugging Face token", map[string]string{"MODEL": "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH"}, "a Hugging Face token"},
		{"an npm token", map[string]string{"R": "npm_abcdefghijklmnopqrstuvwxyz0123456789"}, "an npm token"},
		{"a Google OAuth token", map[string]string{"G": "ya29.a0AfH6SMBabcdefghijklmnopqrstuv"}, "a Google OAuth token"},
		{"Node's trust store", map[string]string{"NODE_EXTRA_CA_CERTS": "/tmp/mine.pem"}, "set by airlock"},
		{"the JVM's proxy and trust", map[string]string{"JAVA_TOOL_OPTIONS": "-Xmx1g"}, "set by airlock"},
		{"git's trust store", map[string]string{"git_ssl_cainfo": "/tmp/x"}, "set by airlock"},
		{"pip's trust store", map[string]string{"PIP_CERT": "/tmp/x"}, "set by airlock"},
		{"a token by name", map[string]string{"GITHUB_TOKEN": "x"}, "GITHUB_TOKEN names a secret"},
		{"a password by name", map[string]string{"db_password": "x"}, "db_password names a secret"},
		{"an API key by name", map[string]string{"OPENAI_API_KEY": "x"}, "names a secret"},
		{"an AWS secret by name", map[string]string{"AWS_SECRET_ACCESS_KEY": "x"}, "names a secret"},
		{"a private key", map[string]string{"CERT": "-----BEGIN RSA PRIVATE KEY-----\nMIIE..."}, "a private key"},
		{"a JWT", map[string]string{"X": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl"}, "a JWT"},
		{"a GitHub token", map[string]string{"NOTE": "ghp_0123456789abcdefghijABCDEFGHIJ012345"}, "a GitHub token"},
		{"an AWS key id", map[string]string{"ID": "AKIAIOSFODNN7EXAMPLE"}, "an AWS access key"},
		{"an API secret key", map[string]string{"K": "sk-proj-abcdefghijklmnopqrstuvwxyz012345"}, "an API secret key"},
		{"a Vault token", map[string]string{"V": "hvs.CAESIJabcdefghijklmnopqrstuvwx"}, "a Vault token"},
		{"a bearer header", map[string]string{"H": "Bearer abcdefghijklmnop0123456789"}, "a bearer credential"},
		{"a URL with a password", map[string]string{"DATABASE_URL": "postgres://app:hunter2hunter2@db:5432/app"}, "a URL with a password"},
		{"the proxy", map[string]string{"https_proxy": ""}, "set by airlock"},
		{"the trust store", map[string]string{"SSL_CERT_FILE": "/tmp/ca.pem"}, "set by airlock"},
		{"HOME", map[string]string{"HOME": "/"}, "set by airlock"},
		{"the process marker", map[string]string{"AIRLOCK_EXEC": "x"}, "set by airlock"},
		{"not a name", map[string]string{"A-B": "1"}, "not a variable name"},
		{"a name that sets another", map[string]string{"LANG=C HTTPS_PROXY": "x"}, "not a variable name"},
		{"a NUL", map[string]string{"A": "x\x00y"}, "NUL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := pool.CheckEnv(c.env)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, pool.ErrBadRequest)):
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			case err != nil:
				for _, v := range c.env {
					if len(v) > 3 && strings.Contains(err.Error(), v) {
						t.Fatalf("the error repeats the value: %v", err)
					}
				}
			}
		})
	}
	big := map[string]string{}
	for i := range pool.MaxEnv + 1 {
		big["V_"+strconv.Itoa(i)] = "1"
	}
	if err := pool.CheckEnv(big); err == nil {
		t.Error("more variables than allowed passed")
	}
}
