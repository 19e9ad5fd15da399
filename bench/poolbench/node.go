package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/internal/devstack"
	"github.com/airlock-dev/airlock/internal/wait"
	"github.com/airlock-dev/airlock/mcpserver"
	"github.com/airlock-dev/airlock/node"
)

// nodeRun is what the whole-node phase measures and how much of it.
type nodeRun struct {
	Rounds   int    // rounds of leases per concurrency level, each of Warm leases
	Warm     int    // warm sandboxes per template, leased in one round
	Requests int    // requests per mode for the gateway's added latency
	Vault    string // the Vault binary the dev stack runs
	// Kube, when set, runs the node on the Kubernetes backend against that cluster instead of
	// the local engine; its figures are named "k8s-" and the runtime.
	Kube *kubeCluster
}

// nodeBench runs a whole node in this process on its own network, with the dev stack around it
// (Redis, a Vault dev server, the demo upstream) and one template per runtime of rts, each
// holding n.Warm real warm sandboxes. For each runtime it measures, through the API, warm
// leases at 1 and 10 clients and each lease's first exec, then the gateway's added latency seen
// from inside a sandbox: the same HTTPS request to the demo upstream through the gateway (which
// injects the demo credential) less the host's own request straight to it, on a fresh
// connection per request and on one kept alive.
func nodeBench(ctx context.Context, rts []string, n nodeRun, figs figures) error {
	if _, err := exec.LookPath("curl"); err != nil {
		return errors.New("the host's curl is needed for the direct baseline (scripts/bench-pool.sh installs it)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir, err := os.MkdirTemp("", "poolbench-node")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := config.DevDefaults()
	cfg.Node, cfg.StateDir = "poolbench", dir
	cfg.API.Listen = "127.0.0.1:0"
	cfg.Network = config.Network{Name: "airlock-pbnode", Bridge: "airlock-pbn", Subnet: "10.221.0.0/24"}
	cfg.Dev.DemoUpstream = "127.0.0.1:0"
	if vault, err := filepath.Abs(n.Vault); err == nil {
		cfg.Vault.Binary = vault
	}
	label := func(rt string) string { return rt }
	if n.Kube != nil {
		cfg.Node = "poolbench-k"
		cfg.Backend = "kubernetes"
		cfg.Kubernetes = n.Kube.config()
		label = func(rt string) string { return "k8s-" + rt }
		if err := n.Kube.namespace(ctx, cfg.Kubernetes.Namespace); err != nil {
			return err
		}
	}
	cfg.Templates = nil
	for _, rt := range rts {
		t := config.DefaultTemplate()
		t.Name, t.Runtime, t.MinWarm, t.MaxTotal = rt, rt, n.Warm, 2*n.Warm+2
		t.WaitFor = time.Minute
		cfg.Templates = append(cfg.Templates, t)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	stack, err := devstack.Start(ctx, &cfg, func(string) string { return "" })
	if err != nil {
		return err
	}
	defer stack.Stop()
	demo := ""
	for _, u := range cfg.Gateway.PrivateUpstreams {
		if u.Host == config.DemoHost {
			demo = u.Address
		}
	}
	deps := node.Deps{RedisURL: stack.RedisURL, VaultAddr: stack.VaultAddr, VaultToken: stack.VaultToken,
		APIKeys: stack.APIKeys, Issuers: stack.Issuers, Minter: stack.Minter}
	ready := make(chan node.Ready, 1)
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, cfg, deps, poolLog(), func(r node.Ready) { ready <- r })
	}()
	defer func() {
		cancel()
		<-done // the node destroys its sandboxes and removes its network before it returns
	}()
	var r node.Ready
	select {
	case r = <-ready:
	case err := <-done:
		return fmt.Errorf("the node stopped before it was ready: %w", err)
	case <-time.After(3 * time.Minute):
		return errors.New("the node was not ready after 3 minutes")
	}
	c := &client.Client{Addr: r.API, Token: stack.APIKey}
	warm := func(name string) error {
		return wait.Until(2*time.Minute, "the "+name+" template to hold "+strconv.Itoa(n.Warm)+" warm sandboxes", func() bool {
			ps, err := c.Pools(ctx)
			if err != nil {
				return false
			}
			for _, p := range ps {
				if p.Template == name {
					return p.Warm >= n.Warm
				}
			}
			return false
		})
	}
	for _, rt := range rts {
		if err := warm(rt); err != nil {
			return err
		}
	}

	fmt.Printf("Whole node, real warm sandboxes (%d per template; %d rounds of %d leases per level; the dev issuer mints each lease's token).\n", n.Warm, n.Rounds, n.Warm)
	fmt.Println("Each client leases, runs `true` through the API and releases, one lease after another; lease to first")
	fmt.Println("command is the lease and that exec together, what a backend waits for its first result:")
	fmt.Println()
	fmt.Println("| runtime | clients | leases | lease p50 ms | p99 | first exec p50 ms | p99 | lease to first command p50 ms | p99 | release p50 ms | p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, rt := range rts {
		for _, conc := range []int{1, 10} {
			var all cycle
			for range n.Rounds {
				if err := warm(rt); err != nil {
					return err
				}
				cy, err := leaseRound(ctx, c, rt, n.Warm, conc)
				if err != nil {
					return err
				}
				all.add(cy)
			}
			figs.set(label(rt), fmt.Sprintf("warm lease p50 @%d", conc), ms(pct(all.lease, 0.5)))
			figs.set(label(rt), fmt.Sprintf("warm lease p99 @%d", conc), ms(pct(all.lease, 0.99)))
			figs.set(label(rt), fmt.Sprintf("lease to first command p50 @%d", conc), ms(pct(all.first, 0.5)))
			figs.set(label(rt), fmt.Sprintf("lease to first command p99 @%d", conc), ms(pct(all.first, 0.99)))
			fmt.Printf("| %s | %d | %d | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", label(rt), conc, len(all.lease),
				ms(pct(all.lease, 0.5)), ms(pct(all.lease, 0.99)), ms(pct(all.exec, 0.5)), ms(pct(all.exec, 0.99)),
				ms(pct(all.first, 0.5)), ms(pct(all.first, 0.99)), ms(pct(all.release, 0.5)), ms(pct(all.release, 0.99)))
		}
	}

	if n.Kube != nil {
		// The gateway's latency is the Docker run's: the same gateway, and the host's direct
		// baseline reads the bundle the Docker backend writes.
		return nil
	}
	fmt.Printf("\nThe gateway's added latency seen from inside (HTTPS GET to the demo upstream, %d requests per mode, curl's time_total):\n\n", n.Requests)
	fmt.Println("| runtime | connection | through the gateway p50 ms | p99 ms | host direct p50 ms | added p50 ms |")
	fmt.Println("|---|---|---|---|---|---|")
	url := "https://" + config.DemoHost + "/whoami"
	// The same CA bundle the sandboxes mount (the host's roots and the deployment CA), so both
	// sides load as many roots.
	direct := []string{"--noproxy", "*", "--cacert", filepath.Join(dir, "ca-bundle.pem"), "--connect-to", config.DemoHost + ":443:" + demo}
	for _, mode := range []struct {
		name string
		keep bool
	}{{"fresh", false}, {"kept alive", true}} {
		base, err := hostTimes(ctx, curlTimes(url, n.Requests, mode.keep, direct...))
		if err != nil {
			return fmt.Errorf("the host's direct requests: %w", err)
		}
		for _, rt := range rts {
			inside, err := sandboxTimes(ctx, c, rt, curlTimes(url, n.Requests, mode.keep))
			if err != nil {
				return fmt.Errorf("requests from inside a %s sandbox: %w", rt, err)
			}
			added := ms(pct(inside, 0.5)) - ms(pct(base, 0.5))
			figs.set(label(rt), "gateway added p50 ("+mode.name+")", added)
			fmt.Printf("| %s | %s | %.2f | %.2f | %.2f | %.2f |\n", label(rt), mode.name, ms(pct(inside, 0.5)), ms(pct(inside, 0.99)), ms(pct(base, 0.5)), added)
		}
	}
	fmt.Println()
	return runLatency(ctx, c, n.Requests)
}

// runLatency times `true` run in a warm runc sandbox through the HTTP API (the Go client) and
// through MCP (airlock's MCP server in this process, the go-sdk client over an in-memory
// transport, calling run), k times each.
func runLatency(ctx context.Context, c *client.Client, k int) error {
	lv, err := c.Lease(ctx, api.LeaseRequest{Template: "runc", Allow: []string{}})
	if err != nil {
		return err
	}
	defer c.Release(context.WithoutCancel(ctx), lv.ID)
	srv := mcpserver.New(mcpserver.Config{Addr: c.Addr, Key: c.Token})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, st, nil); err != nil {
		return err
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "poolbench", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	ways := []struct {
		name string
		run  func() error
	}{
		{"HTTP API (Go client)", func() error {
			code, err := c.Exec(ctx, lv.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
			if err == nil && code != 0 {
				err = fmt.Errorf("true exited %d", code)
			}
			return err
		}},
		{"MCP run tool (go-sdk client, in-process server)", func() error {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"lease": lv.ID, "argv": []string{"true"}}})
			if err == nil && res.IsError {
				err = fmt.Errorf("run: %v", res.Content)
			}
			return err
		}},
	}
	fmt.Printf("Running `true` in a warm runc sandbox, %d times each way:\n\n", k)
	fmt.Println("| way | p50 ms | p99 ms |")
	fmt.Println("|---|---|---|")
	for _, w := range ways {
		var lat []time.Duration
		for range k {
			s := time.Now()
			if err := w.run(); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			lat = append(lat, time.Since(s))
		}
		fmt.Printf("| %s | %.1f | %.1f |\n", w.name, ms(pct(lat, 0.5)), ms(pct(lat, 0.99)))
	}
	fmt.Println()
	return nil
}

// cycle is one lease as an agent backend lives it, timed in its parts: the lease, its first
// command (`true`), and the release; first is what the backend waits before its first result.
type cycle struct{ lease, exec, first, release []time.Duration }

func (c *cycle) add(o cycle) {
	c.lease, c.exec = append(c.lease, o.lease...), append(c.exec, o.exec...)
	c.first, c.release = append(c.first, o.first...), append(c.release, o.release...)
}

// leaseRound takes k leases of template from conc clients at once; each client leases, runs
// `true` and releases, one lease after another, timing each part.
func leaseRound(ctx context.Context, c *client.Client, template string, k, conc int) (cycle, error) {
	var mu sync.Mutex
	var out cycle
	var errs []error
	work := make(chan struct{}, k)
	for range k {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				s := time.Now()
				lv, err := c.Lease(ctx, api.LeaseRequest{Template: template, Allow: []string{config.DemoHost}})
				d := time.Since(s)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				e := time.Now()
				code, err := c.Exec(ctx, lv.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
				f := time.Since(e)
				r := time.Now()
				rerr := c.Release(ctx, lv.ID)
				rel := time.Since(r)
				mu.Lock()
				switch {
				case err != nil || code != 0:
					errs = append(errs, fmt.Errorf("first exec in %s: exit %d, %v", lv.ID, code, err))
				case rerr != nil:
					errs = append(errs, fmt.Errorf("release %s: %v", lv.ID, rerr))
				default:
					out.lease, out.exec = append(out.lease, d), append(out.exec, f)
					out.first, out.release = append(out.first, d+f), append(out.release, rel)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// curlTimes is a shell command that makes k GET requests to url with curl, printing each one's
// time_total in seconds: k runs of curl (a fresh connection each), or one curl for all k,
// which keeps its connection alive (its first, connecting, request is not printed).
func curlTimes(url string, k int, keep bool, args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	opts := "-sS -o /dev/null -w '%{time_total}\\n' " + strings.Join(q, " ")
	if !keep {
		return fmt.Sprintf("for i in $(seq %d); do curl %s %s || exit 1; done", k, opts, url)
	}
	return fmt.Sprintf("urls=; for i in $(seq %d); do urls=\"$urls -o /dev/null %s\"; done; curl -sS -w '%%{time_total}\\n' %s $urls | tail -n +2",
		k+1, url, strings.Join(q, " "))
}

// hostTimes runs script on the host and parses the times it prints.
func hostTimes(ctx context.Context, script string) ([]time.Duration, error) {
	out, err := exec.CommandContext(ctx, "sh", "-c", script).Output()
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	return parseTimes(out)
}

// sandboxTimes leases a sandbox of template allowed the demo upstream with its credential, runs
// script in it, and parses the times it prints.
func sandboxTimes(ctx context.Context, c *client.Client, template, script string) ([]time.Duration, error) {
	lv, err := c.Lease(ctx, api.LeaseRequest{Template: template, Allow: []string{config.DemoHost + "=demo"}})
	if err != nil {
		return nil, err
	}
	defer c.Release(context.WithoutCancel(ctx), lv.ID)
	var out, errOut bytes.Buffer
	code, err := c.Exec(ctx, lv.ID, api.ExecRequest{Cmd: []string{"sh", "-c", script}, Timeout: "5m"}, &out, &errOut)
	if err != nil || code != 0 {
		return nil, fmt.Errorf("exit %d, %v: %s", code, err, errOut.Bytes())
	}
	return parseTimes(out.Bytes())
}

func parseTimes(out []byte) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Fields(string(out)) {
		s, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("curl printed %q, not a time", f)
		}
		ds = append(ds, time.Duration(s*float64(time.Second)))
	}
	if len(ds) == 0 {
		return nil, errors.New("no times printed")
	}
	return ds, nil
}

// pct is the q-quantile of ds by nearest rank (ds is sorted in place).
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*q+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// figures are the measured figures per runtime, for the gvisor/runc ratios.
type figures map[string]map[string]float64

func (f figures) set(runtime, name string, v float64) {
	if f[runtime] == nil {
		f[runtime] = map[string]float64{}
	}
	f[runtime][name] = v
}

// ratios prints runsc's and crun's figure over runc's for each figure both have, on each backend,
// and the Kubernetes backend's over Docker's.
func (f figures) ratios() {
	f.compare("runc", "runsc", "Each figure under runsc over the same under runc (cold start and memory: the default image)")
	f.compare("runc", "crun", "Each figure under crun over the same under runc (the default image)")
	f.compare("k8s-runc", "k8s-runsc", "On the Kubernetes backend, each figure under the gvisor RuntimeClass over the same under runc")
	f.compare("runc", "k8s-runc", "Each figure on the Kubernetes backend over the same on Docker, runc")
	f.compare("runsc", "k8s-runsc", "Each figure on the Kubernetes backend over the same on Docker, gVisor")
}

// compare prints f[b]'s figures over f[a]'s, for each figure both have.
func (f figures) compare(a, b, title string) {
	x, y := f[a], f[b]
	if x == nil || y == nil {
		return
	}
	fmt.Printf("\n%s:\n\n", title)
	fmt.Printf("| figure | %s | %s | %s/%s |\n", a, b, b, a)
	fmt.Println("|---|---|---|---|")
	for _, name := range slices.Sorted(maps.Keys(x)) {
		v, ok := y[name]
		if !ok {
			continue
		}
		ratio := "-"
		if x[name] > 0 {
			ratio = fmt.Sprintf("%.2f", v/x[name])
		}
		fmt.Printf("| %s | %.2f | %.2f | %s |\n", name, x[name], v, ratio)
	}
	fmt.Println()
}
