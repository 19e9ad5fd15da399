// Package cli is what airlock's two commands share: the client (cmd/airlock), which links no
// server, and the node (cmd/airlock-node), to which the client hands the node's own commands.
// It holds where the local node keeps its state and what `airlock up` leaves there, the node's
// commands and the hand-over, and the conventions both follow in reading a time and printing
// text they did not write. It links no server either (TestDependencies of cmd/airlock).
package cli
