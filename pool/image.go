package pool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// templateImage is what the runtime last said of a template's image: its id, or why none can
// be used (missing, or failing the hardening checks).
type templateImage struct {
	id  string
	err error
}

// refreshImages asks the runtime for every template's current image and returns the templates
// whose image changed (a rebuild): their warm sandboxes are stale. A template whose image cannot
// be used is logged when that starts or its reason changes, and gets no new sandboxes meanwhile.
func (s *supply) refreshImages(ctx context.Context) []string {
	// In parallel: a new id costs the runtime a read of the image's files.
	type answer struct {
		id  string
		err error
	}
	answers := make(map[string]answer, len(s.templates))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, t := range s.templates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := s.runtime.Image(ctx, t)
			mu.Lock()
			answers[name] = answer{id, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	var changed []string
	for name := range s.templates {
		if s.noteImage(name, answers[name].id, answers[name].err) {
			changed = append(changed, name)
		}
	}
	return changed
}

// noteImage records what the runtime said of template name's image and reports whether the id
// changed from one already in use (a rebuild). A template whose image cannot be used is logged
// when that starts or its reason changes.
func (s *supply) noteImage(name, id string, err error) bool {
	s.imageMu.Lock()
	old := s.images[name]
	if err != nil && old.id != "" {
		// The sandboxes already made from a checked image keep serving.
		s.images[name] = templateImage{id: old.id, err: err}
	} else {
		s.images[name] = templateImage{id: id, err: err}
	}
	s.imageMu.Unlock()
	switch {
	case err != nil && (old.err == nil || old.err.Error() != err.Error()):
		s.log.Error("template image cannot be used; no new sandboxes until it can", "template", name, "image", s.templates[name].Image, "err", err)
	case err == nil && old.id != "" && old.id != id:
		s.log.Info("template image changed; draining the warm sandboxes made from the old one", "template", name, "old", short(old.id), "new", short(id))
		return true
	}
	return false
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(12, len(id))]
}

// image returns the id new sandboxes of template name are made from, asking the runtime when
// nothing is known yet (a cold start before the first refresh).
func (s *supply) image(ctx context.Context, name string) (string, error) {
	s.imageMu.Lock()
	im, known := s.images[name]
	s.imageMu.Unlock()
	if !known {
		id, err := s.runtime.Image(ctx, s.templates[name])
		s.noteImage(name, id, err)
		s.imageMu.Lock()
		im = s.images[name]
		s.imageMu.Unlock()
	}
	if im.err != nil {
		return "", fmt.Errorf("template %q: %w", name, im.err)
	}
	return im.id, nil
}

// stale reports whether sb, a sandbox of this node, was made from an image its template no
// longer uses.
func (s *supply) stale(sb Sandbox) bool {
	if sb.Node != s.node || sb.Image == "" {
		return false
	}
	s.imageMu.Lock()
	defer s.imageMu.Unlock()
	cur := s.images[sb.Template].id
	return cur != "" && cur != sb.Image
}

// create makes a sandbox of t from its template's current image.
func (s *supply) create(ctx context.Context, t Template) (Sandbox, error) {
	id, err := s.image(ctx, t.Name)
	if err != nil {
		return Sandbox{}, err
	}
	t.Image = id
	start := time.Now()
	sb, err := s.runtime.Create(ctx, t)
	s.metrics.observeCreate(time.Since(start), err)
	sb.Image = id
	return sb, err
}
