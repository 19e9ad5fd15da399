package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/airlock-dev/airlock/pool/docker"
)

// networkCost measures what the engine's sandbox network costs a container's making and removal:
// p workers (for each p of parallel) loop creating, starting and removing a container of the
// default image under the runtime rt, n per level, in three network modes: the sandbox network
// (an internal bridge network, as every Docker sandbox has), network mode none (the engine's
// setkey hook still runs), and the network disabled (no hook: what a container the node wired
// itself would start from). The containers carry none of a sandbox's mounts or agent; their
// network is all that differs between the rows. Nothing in them runs but sleep.
func networkCost(n int, parallel []int, rt string) error {
	ctx := context.Background()
	if !engineHas(rt) {
		return fmt.Errorf("the engine has no runtime %s", rt)
	}
	// The runtime itself goes unused: it makes the sandbox network, as a node does.
	_, done, err := benchRuntime(ctx, "poolbench-network", "airlock-pbnet", "airlock-pbn", 218)
	if err != nil {
		return err
	}
	defer done()
	cli, err := docker.NewClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	fmt.Printf("What the sandbox network costs the engine (%s; plain containers of the default image, each worker loops create, start, remove; %d per level):\n\n", rt, n)
	fmt.Println("| network | at once | containers/s | create and start p50 ms | p99 ms | remove p50 ms | p99 ms |")
	fmt.Println("|---|---|---|---|---|---|---|")
	modes := []struct {
		name     string
		mode     container.NetworkMode
		disabled bool
	}{
		{"sandbox network", "airlock-pbnet", false},
		{"none", "none", false},
		{"disabled", "none", true},
	}
	for _, m := range modes {
		for _, p := range parallel {
			jobs := make(chan struct{}, n)
			for range n {
				jobs <- struct{}{}
			}
			close(jobs)
			var mu sync.Mutex
			var up, rm []time.Duration
			var errs []error
			var wg sync.WaitGroup
			start := time.Now()
			for range p {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range jobs {
						s := time.Now()
						id, err := plainContainer(ctx, cli, rt, m.mode, m.disabled)
						u := time.Since(s)
						s = time.Now()
						var rerr error
						if id != "" {
							rerr = cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true})
						}
						r := time.Since(s)
						mu.Lock()
						errs = append(errs, err, rerr)
						if err == nil {
							up, rm = append(up, u), append(rm, r)
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			took := time.Since(start)
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("%s at %d at once: %w", m.name, p, err)
			}
			fmt.Printf("| %s | %d | %.2f | %.0f | %.0f | %.0f | %.0f |\n", m.name, p, float64(n)/took.Seconds(),
				ms(pct(up, 0.5)), ms(pct(up, 0.99)), ms(pct(rm, 0.5)), ms(pct(rm, 0.99)))
		}
	}
	fmt.Println()
	return nil
}

// plainContainer creates and starts a container of the default image that sleeps, under rt, in
// network mode, with the network disabled when disabled; it returns the id once created, so a
// failed start is removed too.
func plainContainer(ctx context.Context, cli *client.Client, rt string, mode container.NetworkMode, disabled bool) (string, error) {
	cc := &container.Config{Image: "airlock/default:latest", Entrypoint: []string{"sleep"}, Cmd: []string{"infinity"},
		NetworkDisabled: disabled, Labels: map[string]string{docker.LabelManaged: "true", docker.LabelNode: "poolbench-network"}}
	hc := &container.HostConfig{NetworkMode: mode, Runtime: rt, CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"}, ReadonlyRootfs: true}
	c, err := cli.ContainerCreate(ctx, cc, hc, nil, nil, "")
	if err != nil {
		return "", err
	}
	return c.ID, cli.ContainerStart(ctx, c.ID, container.StartOptions{})
}
