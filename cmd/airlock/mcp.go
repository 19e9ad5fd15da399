package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/mcpserver"
)

const mcpUsage = `usage: airlock mcp [--http ADDR [--tls-cert F --tls-key F] [--any-key] [--idle D]] [--keep]
  An MCP server for agents: sandbox_create, sandbox_list, sandbox_release, run, write_file,
  read_file, list_files, start_process, process_output, kill_process, expose_port, explain.
  Without --http it serves one session on stdin and stdout (what an agent's MCP client runs).
  --http ADDR   serve MCP's streamable HTTP transport on ADDR instead (loopback unless TLS);
                every request carries the API key as 'Authorization: Bearer KEY'
  --any-key     accept any API key the node accepts, each session acting as its key's tenant
                (otherwise only the key this command uses)
  --idle D      end an HTTP session after this long without a request (default 30m)
  --keep        keep the sandboxes a session created when it ends (default: release them,
                except those created with keep)
The node is found as for the other commands (AIRLOCK_ADDR and AIRLOCK_TOKEN, or 'airlock up').
`

func cmdMCP(args []string) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	httpAddr := fs.String("http", "", "serve streamable HTTP on this address")
	certFile := fs.String("tls-cert", "", "TLS certificate (PEM) for --http")
	keyFile := fs.String("tls-key", "", "TLS key (PEM) for --http")
	anyKey := fs.Bool("any-key", false, "accept any API key the node accepts")
	idle := fs.Duration("idle", 30*time.Minute, "end an idle HTTP session after this long")
	keep := fs.Bool("keep", false, "keep sandboxes when a session ends")
	pos, code, ok := parseInterleaved(fs, mcpUsage, args)
	if !ok {
		return code
	}
	if len(pos) > 0 || (*certFile == "") != (*keyFile == "") {
		fmt.Fprint(os.Stderr, mcpUsage)
		return 2
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	srv := mcpserver.New(mcpserver.Config{Addr: c.Addr, Key: c.Token, HTTP: c.HTTP, AnyKey: *anyKey, KeepOnClose: *keep, Version: version})
	defer srv.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *httpAddr == "" {
		if err := srv.RunStdio(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return fail(err)
		}
		return 0
	}
	host, _, err := net.SplitHostPort(*httpAddr)
	if err != nil {
		return fail(fmt.Errorf("--http %q: %v", *httpAddr, err))
	}
	if ip := net.ParseIP(host); *certFile == "" && (ip == nil || !ip.IsLoopback()) {
		return fail(fmt.Errorf("--http %s is beyond loopback: API keys would cross the network in clear; give --tls-cert and --tls-key", *httpAddr))
	}
	l, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: srv.HTTPHandler(*idle), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	scheme := "http"
	if *certFile != "" {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "airlock mcp: serving streamable HTTP at %s://%s/\n", scheme, l.Addr())
	if *certFile != "" {
		err = hs.ServeTLS(l, *certFile, *keyFile)
	} else {
		err = hs.Serve(l)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	return 0
}
