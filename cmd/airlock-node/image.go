package main

import (
	"fmt"
	"os"
	"os/exec"
	"slices"

	"github.com/airlock-dev/airlock/pool/docker"
	"github.com/airlock-dev/airlock/pool/inside"
)

// cmdImage builds the sandbox images that ship with airlock on the local engine: the default,
// and the python and node toolchains. With no name it builds all three.
func cmdImage(args []string) int {
	names := args[min(1, len(args)):]
	if len(names) == 0 {
		names = inside.ShippedImages
	}
	if len(args) < 1 || args[0] != "build" || slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(inside.ShippedImages, n) }) {
		fmt.Fprintln(os.Stderr, "usage: airlock image build [default|python|node ...]   (templates built from a Dockerfile: airlock template build)")
		return 2
	}
	for _, name := range names {
		cmd := exec.Command("bash", "-c", docker.ImageScript, "airlock-image", name)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fail(fmt.Errorf("building airlock/%s: %w", name, err))
		}
	}
	return 0
}
