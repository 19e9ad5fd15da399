// Command vault is HashiCorp Vault's own server and CLI, built from pinned Go modules so that the
// tests and `airlock up` get a real Vault on machines where no Vault package is available.
package main

import (
	"os"

	"github.com/hashicorp/vault/command"
)

func main() { os.Exit(command.Run(os.Args[1:])) }
