// Package api serves the pool's HTTP API under /v1 for agent backends and the CLI.
//
// Its requests and answers are defined in the leaf package apitype (aliased here), so a client
// reads them without linking the server.
//
// Exec output is streamed as frames: one byte naming the stream (1 stdout, 2 stderr, 3 exit),
// three zero bytes, a big-endian uint32 payload length, then the payload. The exit frame's payload
// is JSON, {"exit_code": N} or {"exit_code": -1, "error": "..."}, and is always the last frame.
package api
