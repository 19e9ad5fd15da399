package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/pool"
	"github.com/airlock-dev/airlock/pool/docker"
)

// cmdTemplate builds the templates of a configuration whose image comes from a Dockerfile or a
// devcontainer.json, on the local engine, showing the build's progress. A running node sees
// the new image within a second, drains the warm sandboxes made from the old one and refills.
func cmdTemplate(args []string) int {
	if len(args) < 1 || args[0] != "build" {
		fmt.Fprintln(os.Stderr, "usage: airlock template build [--config FILE] [NAME ...]")
		return 2
	}
	fs := flag.NewFlagSet("template build", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "YAML configuration (default: embedded defaults)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return fail(err)
	}
	var todo []pool.Template
	for _, t := range cfg.Templates {
		if t.Built() && (fs.NArg() == 0 || slices.Contains(fs.Args(), t.Name)) {
			todo = append(todo, t)
		}
	}
	for _, name := range fs.Args() {
		t, ok := templateNamed(cfg.Templates, name)
		switch {
		case !ok:
			return fail(fmt.Errorf("no template %q in the configuration", name))
		case !t.Built():
			return fail(fmt.Errorf("template %q names an image (%s) and no build or devcontainer; shipped images are built with `airlock image build`", name, t.Image))
		}
	}
	if len(todo) == 0 {
		fmt.Fprintln(os.Stderr, "airlock: no template in the configuration is built from a Dockerfile or devcontainer.json")
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cli, err := docker.NewClient()
	if err != nil {
		return fail(err)
	}
	for _, t := range todo {
		fmt.Printf("building template %s into %s\n", t.Name, t.Image)
		for _, n := range docker.Notes(t) {
			fmt.Println(n)
		}
		if _, err := docker.BuildTemplate(ctx, cli, t, os.Stdout); err != nil {
			return fail(err)
		}
	}
	return 0
}

func templateNamed(ts []pool.Template, name string) (pool.Template, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return pool.Template{}, false
}
