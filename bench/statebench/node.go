package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitype"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/node"
	"github.com/airlock-dev/airlock/pool"
)

// benchNode is a whole node run in this process for one runtime, with the dev stack around it
// (Redis, a Vault dev server with its transit engine) and snapshots kept in the default
// directory store under its state dir, on this machine's disk. Its two templates are the
// runtime's: big, sized for the largest workspace, and fork, which keeps a warm sandbox for
// each lease of a fork; under runsc, mem is big with snapshot.memory, whose pauses keep running
// processes (a checkpoint of the sandbox), when the plan asks for it.
type benchNode struct {
	rt     string
	big    pool.Template
	fork   pool.Template
	mem    *pool.Template
	c      *client.Client
	minter api.Minter
	vault  *vaultapi.Client
	dir    string
	stop   func()
}

// nodePlan is how the node's templates are sized.
type nodePlan struct {
	// BigMiB is the largest workspace measured; ForkMiB the largest forked; Fork the leases
	// of a fork.
	BigMiB, ForkMiB, Fork int
	Vault                 string
	// ForkTemplate adds the fork template; MemoryTemplate, on a runsc node, the mem template.
	ForkTemplate, MemoryTemplate bool
}

// Sandboxes of the node's templates: the default template's hardening (one CPU among them),
// with room for the workspace, /tmp and what runs beside them.
const (
	headroomMiB = 100 // workspace_mb over the largest workspace: tar's and the fill's slack
	tmpMiB      = 64
	processMiB  = 256 // memory_mb over workspace_mb + tmp_mb, for what runs in the sandbox
)

// octets are the node networks' second octets, one per runtime (the nodes run one after the
// other): a network a killed run left behind stops only that runtime's node, saying so.
var octets = map[string]int{"runc": 226, "runsc": 227}

// startNode starts the node for runtime rt and waits until both its templates are warm.
func startNode(ctx context.Context, rt string, p nodePlan, log *slog.Logger) (*benchNode, error) {
	octet, ok := octets[rt]
	if !ok {
		return nil, fmt.Errorf("runtime %q is not runc or runsc", rt)
	}
	dir, err := os.MkdirTemp("", "statebench-"+rt)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	cfg := config.DevDefaults()
	cfg.Node, cfg.StateDir = "statebench-"+rt, dir
	cfg.API.Listen = "127.0.0.1:0"
	// The review page and the E2B listener have fixed ports by default, which a dev node
	// running on this machine holds: this node serves neither.
	cfg.Review.Listen, cfg.E2B.Listen = "", ""
	cfg.Dev.DemoUpstream = ""
	cfg.Network = config.Network{Name: "airlock-sb" + rt, Bridge: "airlock-sb" + rt, Subnet: fmt.Sprintf("10.%d.0.0/24", octet)}
	if vault, err := filepath.Abs(p.Vault); err == nil {
		cfg.Vault.Binary = vault
	}
	n := &benchNode{rt: rt, dir: dir}
	n.stop = func() { cancel(); os.RemoveAll(dir) }
	fail := func(err error) (*benchNode, error) { n.stop(); return nil, err }
	n.big = sized("state-"+rt, rt, p.BigMiB)
	n.big.MinWarm, n.big.MaxWarm, n.big.MaxTotal = 2, 2, 4
	cfg.Templates = []pool.Template{n.big}
	if p.ForkTemplate {
		n.fork = sized("fork-"+rt, rt, p.ForkMiB)
		n.fork.MinWarm, n.fork.MaxWarm, n.fork.MaxTotal = p.Fork, p.Fork, p.Fork+2
		cfg.Templates = append(cfg.Templates, n.fork)
	}
	if p.MemoryTemplate && rt == "runsc" {
		// One warm sandbox, not two: a resume takes one, as from big, and CI's run of the
		// harness makes one sandbox fewer.
		mem := n.big
		mem.Name, mem.Snapshot.Memory = "memory-"+rt, true
		mem.MinWarm, mem.MaxWarm, mem.MaxTotal = 1, 1, 3
		n.mem = &mem
		cfg.Templates = append(cfg.Templates, mem)
	}
	if err := cfg.Validate(); err != nil {
		return fail(err)
	}
	stack, err := devstack.Start(ctx, &cfg, func(string) string { return "" })
	if err != nil {
		return fail(err)
	}
	deps := node.Deps{RedisURL: stack.RedisURL, VaultAddr: stack.VaultAddr, VaultToken: stack.VaultToken,
		APIKeys: stack.APIKeys, Issuers: stack.Issuers, Minter: stack.Minter}
	ready := make(chan node.Ready, 1)
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg, deps, log, func(r node.Ready) { ready <- r }) }()
	n.stop = func() {
		cancel()
		<-done // the node destroys its sandboxes and removes its network before it returns
		stack.Stop()
		os.RemoveAll(dir)
	}
	var r node.Ready
	select {
	case r = <-ready:
	case err := <-done:
		done <- err // given back for stop, which waits for the node's end
		return fail(fmt.Errorf("the %s node stopped before it was ready: %w", rt, err))
	case <-time.After(3 * time.Minute):
		return fail(fmt.Errorf("the %s node was not ready after 3 minutes", rt))
	}
	n.c = &client.Client{Addr: r.API, Token: stack.APIKey}
	n.minter = stack.Minter
	if n.vault, err = vaultapi.NewClient(&vaultapi.Config{Address: stack.VaultAddr}); err != nil {
		return fail(err)
	}
	n.vault.SetToken(stack.VaultToken)
	for _, t := range cfg.Templates {
		if err := n.full(ctx, t); err != nil {
			return fail(err)
		}
	}
	if err := n.warmUp(ctx, n.big, true); err != nil {
		return fail(fmt.Errorf("the warm-up: %w", err))
	}
	if n.mem != nil {
		if err := n.warmUp(ctx, *n.mem, false); err != nil {
			return fail(fmt.Errorf("the warm-up of template %s: %w", n.mem.Name, err))
		}
	}
	return n, nil
}

// warmUp takes a snapshot of an empty workspace (when snap), pauses a lease of t and resumes
// it, unmeasured: the tenant's transit key is made at its first snapshot, and the runtime's
// answer to whether it can keep memory is probed at the first pause (and, where it can, the
// engine's first checkpoint and restore made), once each as on a node that has served before.
func (n *benchNode) warmUp(ctx context.Context, t pool.Template, snap bool) error {
	id, err := n.lease(ctx, t)
	if err != nil {
		return err
	}
	if snap {
		var s apitype.SnapshotView
		if s, err = n.c.Snapshot(ctx, id, "", nil); err == nil {
			err = n.c.DeleteSnapshot(ctx, s.ID)
		}
	}
	var p apitype.PauseView
	if err == nil {
		p, err = n.c.Pause(ctx, id, true)
	}
	if err != nil {
		return errors.Join(err, n.release(ctx, id))
	}
	tok, err := n.minter.Mint("dev", p.Task, []string{}, 10*time.Minute)
	if err == nil {
		_, err = n.c.Resume(ctx, id, tok, 0)
	}
	return errors.Join(err, n.release(ctx, id))
}

// sized is the default template under runtime rt with a workspace of room for sizeMiB, its
// snapshots capped at the workspace.
func sized(name, rt string, sizeMiB int) pool.Template {
	t := config.DefaultTemplate()
	t.Name, t.Runtime = name, rt
	t.WorkspaceMB, t.TmpMB = int64(sizeMiB+headroomMiB), tmpMiB
	t.MemoryMB = t.WorkspaceMB + t.TmpMB + processMiB
	t.Snapshot.MaxMB = t.WorkspaceMB
	t.WaitFor = time.Minute
	return t
}

// full waits until t's pool holds its min_warm sandboxes and makes none: what each measured
// step starts from, so that no refill runs beside it but the one the step itself causes.
func (n *benchNode) full(ctx context.Context, t pool.Template) error {
	last := "no answer yet"
	err := wait.Until(5*time.Minute, fmt.Sprintf("template %s to hold %d warm sandboxes and make no more", t.Name, t.MinWarm), func() bool {
		ps, err := n.c.Pools(ctx)
		if err != nil {
			last = "the API answered: " + err.Error()
			return false
		}
		for _, p := range ps {
			if p.Template == t.Name {
				last = fmt.Sprintf("%d warm, %d creating, %d leased", p.Warm, p.Creating, p.Leased)
				return p.Warm >= t.MinWarm && p.Creating == 0
			}
		}
		last = "the API lists no such pool"
		return false
	})
	if err != nil {
		return fmt.Errorf("%w (last seen: %s)", err, last)
	}
	return nil
}

// lease takes a lease of t with no scope (nothing in these sandboxes goes out).
func (n *benchNode) lease(ctx context.Context, t pool.Template) (string, error) {
	lv, err := n.c.Lease(ctx, api.LeaseRequest{Template: t.Name, Allow: []string{}})
	if err != nil {
		return "", fmt.Errorf("a lease of %s: %w", t.Name, err)
	}
	return lv.ID, nil
}

// release releases lease id; a failure is reported, as the lease would hold a sandbox.
func (n *benchNode) release(ctx context.Context, id string) error {
	if err := n.c.Release(context.WithoutCancel(ctx), id); err != nil {
		return fmt.Errorf("releasing %s: %w", id, err)
	}
	return nil
}
