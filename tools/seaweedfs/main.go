// Command weed is SeaweedFS's own server (Apache-2.0), built from pinned Go modules so that the
// tests and `airlock up` get a real S3-compatible object store on machines where no package of
// one is available. It dispatches to SeaweedFS's commands as SeaweedFS's weed/weed.go does,
// without its error reporting (which would send nowhere here) and its web UI's static files.
package main

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/seaweedfs/seaweedfs/weed/command"
	weed_server "github.com/seaweedfs/seaweedfs/weed/server"
	"github.com/seaweedfs/seaweedfs/weed/util"
	flag "github.com/seaweedfs/seaweedfs/weed/util/fla9"
	util_http "github.com/seaweedfs/seaweedfs/weed/util/http"
)

// noStatic stands in for the web UI's embedded files, which live in SeaweedFS's main package
// and so cannot be imported: the UI's icons and style sheets answer 404, nothing else changes.
type noStatic struct{}

func (noStatic) Open(string) (fs.File, error) { return nil, fs.ErrNotExist }

func main() {
	weed_server.StaticFS = noStatic{}
	flag.Var(&util.ConfigurationFileDirectory, "config_dir", "directory with toml configuration files")
	flag.Parse()
	args := flag.Args()
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: weed COMMAND [flags]; commands:")
		for _, c := range command.Commands {
			fmt.Fprintf(os.Stderr, "  %s\n", c.Name())
		}
		os.Exit(2)
	}
	for _, c := range command.Commands {
		if c.Name() != args[0] || c.Run == nil {
			continue
		}
		if args[0] != command.GetFuseCommandName() {
			util_http.InitGlobalHttpClient()
		}
		c.Flag.Usage = func() { c.Usage() }
		c.Flag.Parse(args[1:])
		if !c.Run(c, c.Flag.Args()) {
			c.Flag.PrintDefaults()
			os.Exit(1)
		}
		os.Exit(command.CommandExitStatus())
	}
	fmt.Fprintf(os.Stderr, "weed: unknown command %q\n", args[0])
	os.Exit(2)
}
