// Package audit defines the audit record every decision produces and the sinks that keep it: an
// append-only, hash-chained JSON-lines file written through a bounded queue.
package audit
