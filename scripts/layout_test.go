package scripts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeLayoutMatchesTree holds the README's layout section to the tree: every top-level
// directory is listed, every listed directory exists, and every listed part that holds Go code
// has a README of its own.
func TestReadmeLayoutMatchesTree(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Layout\n")
	if !ok {
		t.Fatal("the README has no Layout section")
	}
	_, block, _ := strings.Cut(section, "```\n")
	block, _, _ = strings.Cut(block, "```")
	listed := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		if line == "" || line[0] == ' ' {
			continue
		}
		dir := strings.Fields(line)[0]
		if !strings.HasSuffix(dir, "/") {
			t.Errorf("layout line %q does not start with a directory", line)
			continue
		}
		dir = strings.TrimSuffix(dir, "/")
		listed[strings.SplitN(dir, "/", 2)[0]] = true
		if fi, err := os.Stat(filepath.Join("..", dir)); err != nil || !fi.IsDir() {
			t.Errorf("the layout lists %s/, which is not a directory", dir)
			continue
		}
		if hasGo(filepath.Join("..", dir)) {
			if _, err := os.Stat(filepath.Join("..", dir, "README.md")); err != nil {
				t.Errorf("%s/ holds Go code and has no README.md", dir)
			}
		}
	}
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" && !listed[e.Name()] {
			t.Errorf("the README's layout does not list %s/", e.Name())
		}
	}
}

func hasGo(dir string) bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	return len(files) > 0
}
