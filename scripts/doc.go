// Package scripts holds the shell scripts that `make` runs to install and start what airlock and
// its tests need (deps.sh, engine.sh, vault.sh, lint.sh, the bench scripts); its tests run them
// against stand-ins, and check that the README's layout section matches the tree.
package scripts
