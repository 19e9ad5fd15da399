package main

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/airlock-dev/airlock/pool/docker"
)

// cmdImage builds the default sandbox image on the local engine.
func cmdImage(args []string) int {
	if len(args) < 1 || args[0] != "build" || len(args) > 2 || (len(args) == 2 && args[1] != "default") {
		fmt.Fprintln(os.Stderr, "usage: airlock image build [default]   (other templates name images you build yourself)")
		return 2
	}
	cmd := exec.Command("bash", "-c", docker.ImageScript, "airlock-image")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fail(fmt.Errorf("building %s: %w", docker.DefaultImage, err))
	}
	return 0
}
