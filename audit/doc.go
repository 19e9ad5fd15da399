// Package audit defines the audit record every decision produces and the trail that keeps it:
// hash-chained JSON lines in segments with indexes sealed in the chain, written through a bounded
// queue, with signed checkpoints, retention, queries and a verifier that needs only the public
// key.
package audit
