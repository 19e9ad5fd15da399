package pool

import (
	"context"
	"errors"
)

// ErrCannotCheckpoint is what Checkpoint and Restore return for a sandbox whose runtime cannot
// keep its memory on this node; the wrapping error says why.
var ErrCannotCheckpoint = errors.New("cannot checkpoint")

// Checkpointer is a Runtime that can stop a sandbox with its memory written to disk, and start
// a sandbox again from what was written: what a pause that keeps running processes uses. It is
// optional; a runtime without it (or whose CanCheckpoint says no for a template) pauses by
// keeping files only.
//
// What a checkpoint keeps (gVisor, the one runtime that can here): the memory of every process
// descended from the sandbox's main process, and every tmpfs mount (the workspace, /tmp) byte for
// byte, since under gVisor they are memory too. What it does not keep: processes started by an
// exec (an engine exec, or anything the exec agent runs, which an exec started); runsc ends
// them when it restores, as their caller is gone. For running processes to come back they must
// be started by the sandbox's main process: a template with snapshot.memory makes the exec
// agent that process (the Docker runtime's mainAgent), so that what a lease runs comes back.
// Connections open at checkpoint time are broken after a restore; the sandbox's address may
// change (Restore returns the one it has).
//
// A checkpoint holds everything in the sandbox's memory and files: encrypt it at rest. It can
// be restored only by the same runsc build, into a sandbox of the same template and image.
type Checkpointer interface {
	// CanCheckpoint reports whether t's sandboxes can be checkpointed on this node; when not,
	// why says so in words an operator understands (what is missing and, where it can be,
	// how to get it). It asks the engine, so it may be slow; callers may keep the answer for
	// a while.
	CanCheckpoint(ctx context.Context, t Template) (ok bool, why string)
	// Checkpoint writes sb's state into dir, which is made if missing and must be empty, and
	// leaves sb stopped: no process of it runs and it holds no CPU or memory; Destroy still
	// removes it. dir then holds a few files, readable by the node's user only, that may be
	// moved, archived and encrypted, and brought back to any path for Restore. The checkpoint
	// is sb's state at one instant before it stops: what sb does after it is lost, so cut its
	// network first. A checkpoint that fails leaves sb running as it was. Once the engine has
	// started writing, the checkpoint runs to its end even if ctx ends.
	Checkpoint(ctx context.Context, sb Sandbox, dir string) error
	// Restore starts sb from the checkpoint in dir (which it reads and leaves as it is) and
	// returns sb as it now runs: its address may differ. sb is the checkpointed sandbox
	// itself, stopped, or another sandbox of the same template and image on any node with
	// the same runsc build (a warm one, to resume or fork a checkpoint); a running sb is
	// stopped first and what it ran is lost. The same dir may seed any number of sandboxes.
	Restore(ctx context.Context, sb Sandbox, dir string) (Sandbox, error)
}
