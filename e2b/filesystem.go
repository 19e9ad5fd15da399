package e2b

import (
	"cmp"
	"context"
	"encoding/base64"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/pool"
)

// filesystem.Filesystem on the API's file operations, which keep every path inside the
// lease's workspace (the sandbox user's home): a relative path is taken from there, an
// absolute one must lead into it.

// entryInfo is filesystem.EntryInfo in proto3's JSON mapping (int64 as a string, the
// timestamp in RFC 3339).
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

var fileTypes = map[string]string{"file": "FILE_TYPE_FILE", "dir": "FILE_TYPE_DIRECTORY", "symlink": "FILE_TYPE_SYMLINK"}

// entryOf is e's EntryInfo; ok is false for what E2B has no type for (devices, sockets).
func entryOf(e pool.Entry) (entryInfo, bool) {
	typ, ok := fileTypes[e.Type]
	perm, _ := strconv.ParseUint(e.Mode, 8, 32)
	mode := fs.FileMode(perm) & fs.ModePerm
	switch e.Type {
	case "dir":
		mode |= fs.ModeDir
	case "symlink":
		mode |= fs.ModeSymlink
	}
	info := entryInfo{Name: e.Name, Type: typ, Path: e.Path, Size: strconv.FormatInt(e.Size, 10), Mode: uint32(mode),
		Permissions: mode.String(), Owner: "user", Group: "user", ModifiedTime: e.MTime.UTC().Format(time.RFC3339Nano)}
	if e.Type == "symlink" {
		link := e.Link
		info.SymlinkTarget = &link
	}
	return info, ok
}

// pathRequest is every filesystem request that names one path.
type pathRequest struct {
	Path string `json:"path"`
}

func (s *Server) stat(c call) (any, error) {
	var req pathRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	e, err := c.api.Stat(c.ctx, c.id, req.Path)
	if err != nil {
		return nil, err
	}
	info, _ := entryOf(e)
	return map[string]any{"entry": info}, nil
}

func (s *Server) listDir(c call) (any, error) {
	var req struct {
		Path  string `json:"path"`
		Depth uint32 `json:"depth"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	depth := int(min(max(req.Depth, 1), 64))
	v, err := c.api.ListFiles(c.ctx, c.id, req.Path, depth)
	if err != nil {
		return nil, err
	}
	if v.Truncated {
		return nil, rpcErr("resource_exhausted", "%s holds more than %d entries to depth %d: list less at once", req.Path, pool.MaxListEntries, depth)
	}
	out := make([]entryInfo, 0, len(v.Entries))
	for _, e := range v.Entries {
		if info, ok := entryOf(e); ok {
			out = append(out, info)
		}
	}
	return map[string]any{"entries": out}, nil
}

func (s *Server) makeDir(c call) (any, error) {
	var req pathRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	if _, err := c.api.Stat(c.ctx, c.id, req.Path); err == nil {
		return nil, rpcErr("already_exists", "%s already exists", req.Path)
	} else if asRPC(err).code != "not_found" {
		return nil, err
	}
	if err := c.api.Mkdir(c.ctx, c.id, req.Path); err != nil {
		return nil, err
	}
	return s.statEntry(c, req.Path)
}

// statEntry answers {entry} for p, as MakeDir and Move do.
func (s *Server) statEntry(c call, p string) (any, error) {
	e, err := c.api.Stat(c.ctx, c.id, p)
	if err != nil {
		return nil, err
	}
	info, _ := entryOf(e)
	return map[string]any{"entry": info}, nil
}

func (s *Server) move(c call) (any, error) {
	var req struct {
		Source      string `json:"source"`
		Destination string `json:"destination"`
	}
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	// envd renames over what the destination names, as rename(2) does.
	if err := c.api.Move(c.ctx, c.id, req.Source, req.Destination, true); err != nil {
		return nil, err
	}
	return s.statEntry(c, req.Destination)
}

func (s *Server) remove(c call) (any, error) {
	var req pathRequest
	if err := c.decode(&req); err != nil {
		return nil, err
	}
	return struct{}{}, c.api.Remove(c.ctx, c.id, req.Path, true)
}

// watchDir streams the changes under a folder. A background process of the lease (WatchCmd)
// lists the folder in the sandbox every PollEvery and prints a listing when it changed; each
// is compared with the one before, so changes between two listings come as one event per path
// (a file written twice is one write). The trail records the watch once, as that process.
func (s *Server) watchDir(c call, st *stream) error {
	var req struct {
		Path               string `json:"path"`
		Recursive          bool   `json:"recursive"`
		IncludeEntry       bool   `json:"includeEntry"`
		AllowNetworkMounts bool   `json:"allowNetworkMounts"`
	}
	if err := c.decode(&req); err != nil {
		return err
	}
	depth := 1
	if req.Recursive {
		depth = 64
	}
	base, err := c.api.Stat(c.ctx, c.id, req.Path) // the API's workspace check, and an audit record
	if err != nil {
		return err
	}
	if base.Type != "dir" {
		return rpcErr("invalid_argument", "%s is not a folder", req.Path)
	}
	l, err := c.api.Get(c.ctx, c.id)
	if err != nil {
		return err
	}
	t, ok := s.cfg.Template(l.Template)
	if !ok {
		return rpcErr("internal", "the lease's template %s is not known to this node", l.Template)
	}
	p, err := c.api.StartProcess(c.ctx, c.id, api.ExecRequest{Cmd: pool.WatchCmd(t.Workdir, base.Path, depth, s.cfg.PollEvery)})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 10*time.Second)
		defer cancel()
		c.api.SignalProcess(ctx, c.id, p.ID, "KILL")
	}()
	var (
		r      pool.WatchReader
		before map[string]pool.Entry // nil until the first listing
		outOff int64
		idle   = keepalive(c.r)
	)
	for {
		// Stderr is read from its start each time: the watch writes there only why it ends.
		o, err := c.api.ProcessOutput(c.ctx, c.id, p.ID, client.OutputQuery{StdoutOffset: outOff, Wait: idle, Base64: true})
		if err != nil {
			return err
		}
		if o.StdoutDropped > 0 {
			return rpcErr("resource_exhausted", "%s changed faster than it could be watched", req.Path)
		}
		out, err := base64.StdEncoding.DecodeString(o.Stdout)
		if err != nil {
			return rpcErr("internal", "the watch's output did not decode")
		}
		outOff = o.StdoutOffset
		lists, err := r.Feed(out)
		if err != nil {
			return rpcErr("internal", "the watch's listing: %v", err)
		}
		for _, list := range lists {
			now := make(map[string]pool.Entry, len(list))
			for _, e := range list {
				now[e.Path] = e
			}
			var events []fsEvent
			if before != nil {
				events = diff(base.Path, before, now)
			} else {
				// The first listing is what later ones are compared with: the stream starts
				// once it is known, so a change made after the SDK's watchDir returns is seen.
				if err := st.send(map[string]any{"start": struct{}{}}); err != nil {
					return err
				}
			}
			for _, ev := range events {
				if err := st.send(map[string]any{"filesystem": ev}); err != nil {
					return err
				}
			}
			before = now
		}
		switch {
		case len(out) > 0:
		case !o.Process.Running:
			msg, _ := base64.StdEncoding.DecodeString(o.Stderr)
			return rpcErr("failed_precondition", "the watch of %s ended: %s", req.Path, cmp.Or(strings.TrimSpace(string(msg)), endOf(o.Process).Status))
		case before != nil:
			if err := st.send(map[string]any{"keepalive": struct{}{}}); err != nil {
				return err
			}
		}
	}
}

// fsEvent is filesystem.FilesystemEvent: the path relative to the watched folder.
type fsEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// diff is what changed from before to now under root, in path order.
func diff(root string, before, now map[string]pool.Entry) []fsEvent {
	var out []fsEvent
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, root), "/") }
	for p, e := range now {
		b, had := before[p]
		switch {
		case !had:
			out = append(out, fsEvent{rel(p), "EVENT_TYPE_CREATE"})
		case b.Type != e.Type:
			out = append(out, fsEvent{rel(p), "EVENT_TYPE_REMOVE"}, fsEvent{rel(p), "EVENT_TYPE_CREATE"})
		case !b.MTime.Equal(e.MTime) || b.Size != e.Size:
			out = append(out, fsEvent{rel(p), "EVENT_TYPE_WRITE"})
		case b.Mode != e.Mode:
			out = append(out, fsEvent{rel(p), "EVENT_TYPE_CHMOD"})
		}
	}
	for p := range before {
		if _, ok := now[p]; !ok {
			out = append(out, fsEvent{rel(p), "EVENT_TYPE_REMOVE"})
		}
	}
	// Stable, so a path that changed type is removed before it is created.
	slices.SortStableFunc(out, func(a, b fsEvent) int { return strings.Compare(a.Name, b.Name) })
	return out
}
