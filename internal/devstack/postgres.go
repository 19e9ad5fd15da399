package devstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Postgres is a private PostgreSQL server, for tests of dynamic database credentials.
type Postgres struct {
	*Process
	Addr     string // 127.0.0.1:port
	Password string // of the superuser "postgres"
	dir      string
}

// Close stops the server and removes its files.
func (p *Postgres) Close() {
	p.Stop()
	os.RemoveAll(p.dir)
}

// StartPostgres initialises a cluster in a folder of its own (the postgres user must reach it,
// which a test's private temporary folder does not allow) and runs it on a free loopback port
// with password (SCRAM) authentication. It needs Debian's postgresql and runs as postgres.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		return nil, err
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(bins) == 0 {
		return nil, errors.New("no PostgreSQL server (install Debian's postgresql)")
	}
	bin := bins[len(bins)-1]
	data := filepath.Join(dir, "pgdata")
	os.Chmod(dir, 0o777) // the postgres user writes its socket and data here
	password := RandomSecret("pg-")
	pwfile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwfile, []byte(password), 0o644); err != nil {
		return nil, err
	}
	initdb := exec.CommandContext(ctx, "runuser", "-u", "postgres", "--", filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "--pwfile", pwfile, "--auth-host=scram-sha-256", "--auth-local=scram-sha-256")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := start(ctx, filepath.Join(dir, "postgres.log"), "runuser", "-u", "postgres", "--", filepath.Join(bin, "postgres"),
		"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1")
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitFor(ctx, p, 30*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		p.Stop()
		return nil, fmt.Errorf("postgres did not start: %v\n%s", err, p.tail())
	}
	return &Postgres{Process: p, Addr: addr, Password: password, dir: dir}, nil
}
