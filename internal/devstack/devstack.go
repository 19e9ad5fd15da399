package devstack

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Process is a child process started by this package.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

func start(ctx context.Context, logPath string, name string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and killed if airlock itself dies, so no child outlives the node.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			p.Stop()
		case <-p.done:
		}
	}()
	return p, nil
}

// Stop ends the process (SIGTERM, then SIGKILL after 5s) and waits for it.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

func (p *Process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Redis is a private redis-server.
type Redis struct {
	*Process
	URL string
}

// StartRedis runs redis-server on a unix socket in dir with an append-only file, so a kill -9 of
// the node loses no lease record.
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "redis.sock")
	os.Remove(sock)
	p, err := start(ctx, filepath.Join(dir, "redis.log"), "redis-server",
		"--port", "0", "--unixsocket", sock, "--unixsocketperm", "600",
		"--dir", dir, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
		"--protected-mode", "yes")
	if err != nil {
		return nil, fmt.Errorf("%w (install Debian's redis-server, or set REDIS_URL)", err)
	}
	if err := waitFor(ctx, p, 10*time.Second, func() error {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		p.Stop()
		return nil, fmt.Errorf("redis-server did not start: %v\n%s", err, p.tail())
	}
	return &Redis{Process: p, URL: "unix://" + sock}, nil
}

// Vault is a private Vault dev server.
type Vault struct {
	*Process
	Addr  string
	Token string
}

// StartVault runs `vault server -dev` from binary on a free loopback port with a random root
// token, waits until it is unsealed, and mounts the transit engine at TransitMount (snapshots
// wrap their data keys with it).
func StartVault(ctx context.Context, binary, dir string) (*Vault, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return StartVaultAt(ctx, binary, dir, "127.0.0.1:"+strconv.Itoa(port), "dev-"+randHex(16))
}

// StartVaultAt is StartVault on a given address with a given root token (a dev server keeps
// nothing, so a restart on the same address is a Vault that came back empty).
func StartVaultAt(ctx context.Context, binary, dir, addr, tok string) (*Vault, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p, err := start(ctx, filepath.Join(dir, "vault.log"), binary, "server", "-dev",
		"-dev-root-token-id="+tok, "-dev-listen-address="+addr, "-dev-no-store-token")
	if err != nil {
		return nil, err
	}
	url := "http://" + addr
	if err := waitFor(ctx, p, 30*time.Second, func() error {
		resp, err := http.Get(url + "/v1/sys/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("health %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		p.Stop()
		return nil, fmt.Errorf("vault dev server did not start: %v\n%s", err, p.tail())
	}
	v := &Vault{Process: p, Addr: url, Token: tok}
	if err := v.mountTransit(ctx); err != nil {
		p.Stop()
		return nil, err
	}
	return v, nil
}

// TransitMount is where the dev server mounts the transit engine: the default mount of
// snapshot.Transit, which keeps one key per tenant there.
const TransitMount = "transit"

// mountTransit mounts the transit engine at TransitMount. A dev server starts with only KV
// ("secret/"); production Vaults are set up by their operators (snapshot/README.md says how).
func (v *Vault) mountTransit(ctx context.Context) error {
	c, err := v.Client()
	if err != nil {
		return err
	}
	if err := c.Sys().MountWithContext(ctx, TransitMount, &vaultapi.MountInput{Type: "transit"}); err != nil {
		return fmt.Errorf("seeding the dev vault: mounting the transit engine at %s/: %w", TransitMount, err)
	}
	return nil
}

// Client returns a client of the dev server with its root token.
func (v *Vault) Client() (*vaultapi.Client, error) {
	cfg := vaultapi.DefaultConfig()
	cfg.Address = v.Addr
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	c.SetToken(v.Token)
	return c, nil
}

// SeedKV writes fields at path in the dev server's KV v2 mount "secret".
func (v *Vault) SeedKV(ctx context.Context, path string, fields map[string]any) error {
	c, err := v.Client()
	if err != nil {
		return err
	}
	_, err = c.KVv2("secret").Put(ctx, path, fields)
	return err
}

// TaskRole and TaskPolicy are what the dev Vault offers for per-task tokens: an orphan token
// role whose tokens may carry TaskPolicy (read under secret/airlock/tasks/).
const (
	TaskRole   = "airlock-task"
	TaskPolicy = "airlock-task-read"
)

// SeedTaskRole creates TaskPolicy and the orphan token role TaskRole in the dev server.
func (v *Vault) SeedTaskRole(ctx context.Context) error {
	c, err := v.Client()
	if err != nil {
		return err
	}
	if err := c.Sys().PutPolicyWithContext(ctx, TaskPolicy, `path "secret/data/airlock/tasks/*" { capabilities = ["read"] }`); err != nil {
		return err
	}
	_, err = c.Logical().WriteWithContext(ctx, "auth/token/roles/"+TaskRole, map[string]any{
		"allowed_policies": TaskPolicy, "orphan": true, "token_explicit_max_ttl": "4h",
	})
	return err
}

// FindVault returns the vault binary to run: configured, beside the running executable, or on
// PATH.
func FindVault(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "vault")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("vault"); err == nil {
		return p, nil
	}
	return "", errors.New("no vault binary found beside airlock or on PATH (run `make vault`, or set VAULT_ADDR and VAULT_TOKEN)")
}

func waitFor(ctx context.Context, p *Process, limit time.Duration, check func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return errors.New("process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %v", limit, err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RandomSecret returns a fresh random value for dev credentials and keys.
func RandomSecret(prefix string) string { return prefix + randHex(24) }

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
