// Package slots bounds what clients hold open on a node's listeners, however they hold it:
// connections per address and in all before anyone is authenticated (Listener), how long each
// phase of a connection may go without progress (Server: handshake and headers, a body, a
// stalled transfer, an idle connection), and, once a caller is known, the calls and streams one
// identity holds at once, with a share that only reviewers may take (Set). So no identity can
// hold every slot or the process's file descriptors, and none can starve the security team's
// view.
package slots
