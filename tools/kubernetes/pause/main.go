// Command pause is the test cluster's pod sandbox process (the "pause" container every pod
// holds its namespaces with): it reaps the children it inherits and exits on TERM or INT. It is
// built here because no registry is reachable to pull one from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
