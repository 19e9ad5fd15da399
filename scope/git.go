package scope

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Git narrows a scope to git's smart HTTP protocol: requests on the scope are only fetches from
// and pushes to Repos, a push may update only the refs Push matches (path.Match globs over the
// full ref name, a trailing "/*" also covering deeper refs), and deletes a ref only when Delete
// is set. Repos are "owner/name" as the URL path names them, without ".git", compared exactly: a
// server on a file system that tells case apart (git http-backend) holds ACME/App and acme/app
// as two repositories.
type Git struct {
	Repos  []string `json:"repos" yaml:"repos"`
	Push   []string `json:"push,omitempty" yaml:"push"`
	Delete bool     `json:"delete,omitempty" yaml:"delete"`
}

func (g *Git) canonical() (*Git, error) {
	if len(g.Repos) == 0 {
		return nil, errors.New("repos: name at least one repository")
	}
	c := &Git{Delete: g.Delete}
	for _, r := range g.Repos {
		r = strings.TrimSuffix(strings.Trim(r, "/"), ".git")
		if !validRepo(r) {
			return nil, fmt.Errorf("repos: %q is not a repository path such as acme/app", r)
		}
		c.Repos = append(c.Repos, r)
	}
	for _, p := range g.Push {
		if !strings.HasPrefix(p, "refs/") || strings.ContainsAny(p, " \\\x00") {
			return nil, fmt.Errorf("push: %q is not a ref pattern such as refs/heads/agent/*", p)
		}
		if _, err := path.Match(p, "refs/x"); err != nil {
			return nil, fmt.Errorf("push: %q: %v", p, err)
		}
		c.Push = append(c.Push, p)
	}
	return c, nil
}

// validRepo reports whether r is a plain repository path: segments of letters, digits, '.', '-'
// and '_', none empty, none a dot segment.
func validRepo(r string) bool {
	if r == "" || len(r) > 256 {
		return false
	}
	for seg := range strings.SplitSeq(r, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, c := range seg {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// Git services of the smart HTTP protocol.
const (
	GitUploadPack  = "git-upload-pack"  // fetch and clone
	GitReceivePack = "git-receive-pack" // push
)

// GitRequest reads a smart HTTP request's path (in its wire form) and query: the repository and
// the service it asks for. ok is false for anything else (the dumb protocol, a web page, an API
// call): a git scope allows none of those.
func GitRequest(method, p, query string) (repo, service string, ok bool) {
	var rest string
	switch {
	case method == "GET" && strings.HasSuffix(p, "/info/refs"):
		rest = strings.TrimSuffix(p, "/info/refs")
		switch query {
		case "service=" + GitUploadPack:
			service = GitUploadPack
		case "service=" + GitReceivePack:
			service = GitReceivePack
		default:
			return "", "", false
		}
	case method == "POST" && strings.HasSuffix(p, "/"+GitUploadPack):
		rest, service = strings.TrimSuffix(p, "/"+GitUploadPack), GitUploadPack
	case method == "POST" && strings.HasSuffix(p, "/"+GitReceivePack):
		rest, service = strings.TrimSuffix(p, "/"+GitReceivePack), GitReceivePack
	default:
		return "", "", false
	}
	repo = strings.TrimSuffix(strings.TrimPrefix(rest, "/"), ".git")
	if !validRepo(repo) {
		return "", "", false
	}
	return repo, service, true
}

// AllowsRepo reports whether repo is one of the scope's repositories.
func (g *Git) AllowsRepo(repo string) bool {
	for _, r := range g.Repos {
		if r == repo {
			return true
		}
	}
	return false
}

// AllowsRef reports whether a push may update ref.
func (g *Git) AllowsRef(ref string) bool {
	for _, p := range g.Push {
		if globMatch(p, ref) {
			return true
		}
	}
	return false
}
