package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shared node's built templates: "built" from a Dockerfile, "devc" from a devcontainer.json.
// Their images are removed first, so the node builds both when it starts.
const (
	// The second RUN fails if the build has any network beyond loopback: builds get none.
	builtDockerfile = "FROM airlock/default:latest\nUSER 0:0\nRUN echo %s > /opt/marker\nRUN test -z \"$(ip -o -4 addr show scope global)\"\nUSER 10001:10001\n"
	devcontainerSrc = `// a devcontainer as an editor writes it
{
	"name": "devc",
	"image": "airlock/python:latest",
	"containerEnv": {"GREETING": "from the devcontainer"},
	"forwardPorts": [8080],
	"postCreateCommand": "python3 -c 'open(\"/opt/created\", \"w\").write(\"postCreate ran\")'",
	"customizations": {"vscode": {"extensions": ["ms-python.python"]}},
}
`
)

func writeTemplateSources(dir string) error {
	for _, img := range []string{"airlock/template-built:latest", "airlock/template-devc:latest"} {
		docker("image", "rm", "-f", img)
	}
	for path, body := range map[string]string{
		"built/Dockerfile":                     fmt.Sprintf(builtDockerfile, "first"),
		"devc/.devcontainer/devcontainer.json": devcontainerSrc,
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestBuiltTemplates: templates from a Dockerfile and from a devcontainer.json are built on
// the engine, checked, and leased like any other; a rebuild drains the warm sandboxes made from
// the old image and refills with the new one.
func TestBuiltTemplates(t *testing.T) {
	n := sharedNode(t)
	cfg := filepath.Join(n.dir, n.spec.Name+".yaml")

	t.Run("a devcontainer gives its image, environment, ports and postCreateCommand", func(t *testing.T) {
		a := n.leaseWith(t, "--template", "devc", "--allow", "api.example.test")
		out, errs, code := n.exec(t, a.ID, "bash", "-c", `cat /opt/created; echo; echo "$GREETING"; id -u; python3 -m venv /workspace/v && echo venv ok`)
		if code != 0 || out != "postCreate ran\nfrom the devcontainer\n10001\nvenv ok\n" {
			t.Fatalf("in the devcontainer's sandbox: exit %d %q %s", code, out, errs)
		}
		if _, errs, code := n.cli(t, "port", a.ID, "9090"); code == 0 || !strings.Contains(errs, "exposes only ports [8080]") {
			t.Errorf("a port the devcontainer does not forward: exit %d %s", code, errs)
		}
		if out, errs, code := n.cli(t, "port", a.ID, "8080"); code != 0 || !strings.HasPrefix(out, "http://") {
			t.Errorf("the forwarded port: exit %d %q %s", code, out, errs)
		}
	})

	t.Run("a rebuilt template drains its warm sandboxes and refills", func(t *testing.T) {
		old := n.leaseWith(t, "--template", "built", "--allow", "api.example.test")
		if out, _, _ := n.exec(t, old.ID, "cat", "/opt/marker"); out != "first\n" {
			t.Fatalf("marker before the rebuild: %q", out)
		}
		dockerfile := filepath.Join(n.dir, "built", "Dockerfile")
		if err := os.WriteFile(dockerfile, []byte(fmt.Sprintf(builtDockerfile, "second")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, code := n.cli(t, "template", "build", "--config", cfg, "built")
		if code != 0 || !strings.Contains(out, ": RUN echo second") || !strings.Contains(out, "checking") {
			t.Fatalf("airlock template build: exit %d\n%s\n%s", code, out, errs)
		}
		// Every warm sandbox the node had was made from the old image; once the node has seen
		// the new one, no lease gets an old sandbox.
		eventually(t, 30*time.Second, "the node to see the rebuilt image", func() bool {
			return strings.Contains(n.log.String(), "template image changed; draining")
		})
		for range 3 {
			a := n.leaseWith(t, "--template", "built", "--allow", "api.example.test")
			if out, _, _ := n.exec(t, a.ID, "cat", "/opt/marker"); out != "second\n" {
				t.Errorf("a lease after the rebuild got marker %q", out)
			}
			n.cli(t, "release", a.ID)
		}
		// The lease held across the rebuild keeps its sandbox.
		if out, _, code := n.exec(t, old.ID, "cat", "/opt/marker"); code != 0 || out != "first\n" {
			t.Errorf("the lease held across the rebuild: exit %d %q", code, out)
		}
	})
}

// TestTemplateBuildRefuses: a template that cannot be built, or whose image would weaken the
// sandbox, stops with an error naming the file and line or the check, and tags nothing.
func TestTemplateBuildRefuses(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, file, body string
		want             []string
	}{
		{"unknown instruction", "Dockerfile", "FROM airlock/default:latest\n\nFROBNICATE x\n", []string{"Dockerfile:3:", "unknown instruction"}},
		{"a failing RUN", "Dockerfile", "# comment\nFROM airlock/default:latest\nUSER 0:0\nRUN \\\n  false\n", []string{"Dockerfile:4:", "non-zero code"}},
		{"not FROM first", "Dockerfile", "RUN true\nFROM airlock/default:latest\n", []string{"Dockerfile:1: the first instruction must be FROM"}},
		{"an image no engine here has", "Dockerfile", "FROM example.invalid/nothing:1\n", []string{"Dockerfile:1: FROM example.invalid/nothing:1: this engine has no such image, and nothing is pulled"}},
		{"a setuid file", "Dockerfile", "FROM airlock/default:latest\nUSER 0:0\nRUN cp /bin/true /usr/local/bin/t && chmod u+s /usr/local/bin/t\n",
			[]string{"fails the sandbox hardening checks", "setuid: /usr/local/bin/t"}},
		{"a volume, no mount point, no sandbox user", "Dockerfile", "FROM airlock/default:latest\nUSER 0:0\nRUN rmdir /etc/airlock && sed -i '/^sandbox:/d' /etc/passwd\nVOLUME /data\n",
			[]string{"volumes: the image declares /data", "mount point: /etc/airlock", "user: no account has uid 10001"}},
		{"a privileged devcontainer", "devcontainer.json", "{\n  \"image\": \"airlock/default:latest\",\n  \"privileged\": true\n}\n",
			[]string{"devcontainer.json:3: privileged: not supported"}},
		{"a context leading out of the project", "devcontainer.json", "{\"build\": {\"dockerfile\": \"Dockerfile\", \"context\": \"host\"}}\n",
			[]string{"devcontainer.json:1: build: ", "outside the project"}},
		{"a failing postCreateCommand", "devcontainer.json", "{\n  \"image\": \"airlock/default:latest\",\n\n  \"postCreateCommand\": \"exit 3\"\n}\n",
			[]string{"devcontainer.json:4: postCreateCommand failed at build time"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, fmt.Sprint(i))
			os.MkdirAll(sub, 0o755)
			src := filepath.Join(sub, c.file)
			if c.file == "devcontainer.json" {
				// What a hostile devcontainer could lean on: a Dockerfile that copies its context,
				// and a link in the project to the host's files.
				os.WriteFile(filepath.Join(sub, "Dockerfile"), []byte("FROM airlock/default:latest\nCOPY . /host\n"), 0o644)
				os.Symlink("/etc", filepath.Join(sub, "host"))
			}
			os.WriteFile(src, []byte(c.body), 0o644)
			field := fmt.Sprintf("build: {dockerfile: %q}", src)
			if c.file == "devcontainer.json" {
				field = fmt.Sprintf("devcontainer: %q", src)
			}
			name := fmt.Sprintf("refused%d", i)
			cfg := filepath.Join(sub, "airlock.yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("templates:\n  - name: %s\n    %s\n", name, field)), 0o644)
			docker("image", "rm", "-f", "airlock/template-"+name+":latest")
			out, errs, code := runCLI(t, "template", "build", "--config", cfg)
			if code == 0 {
				t.Fatalf("the build succeeded:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("the error lacks %q:\n%s", w, errs)
				}
			}
			if out, err := docker("image", "inspect", "airlock/template-"+name+":latest"); err == nil {
				t.Errorf("a refused image was tagged: %.200s", out)
			}
		})
	}
}

// runCLI runs the airlock binary with args, no node involved, for up to 5 minutes.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	case err != nil:
		t.Fatalf("airlock %v: %v", args, err)
	}
	return out.String(), errb.String(), 0
}
