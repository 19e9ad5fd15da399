package devcontainer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseMapsTheSubset(t *testing.T) {
	src := `// a devcontainer, as editors write them
{
	"name": "py", /* the name is only for people */
	"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"},},
	"containerEnv": {"LANG": "C.UTF-8", "URL": "http://x//y"},
	"remoteEnv": {"EDITOR": "vi"},
	"forwardPorts": [8080, "localhost:5173", 8080],
	"postCreateCommand": "pip install -e . // not a comment",
	"onCreateCommand": ["make", "deps"],
	"updateContentCommand": {"b": "echo b", "a": ["echo", "a"]},
	"customizations": {"vscode": {}},
	"postStartCommand": "serve",
	"hostRequirements": {"cpus": 4},
	"somethingNew": true,
}
`
	path := filepath.Join("/src/app/.devcontainer", "devcontainer.json")
	s, err := Parse(path, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s.Dockerfile != "/src/app/.devcontainer/Dockerfile" || s.Context != "/src/app" || s.Args["V"] != "1" || s.Line != 4 {
		t.Errorf("build: %q %q %v line %d", s.Dockerfile, s.Context, s.Args, s.Line)
	}
	if s.Env["LANG"] != "C.UTF-8" || s.Env["URL"] != "http://x//y" || s.Env["EDITOR"] != "vi" {
		t.Errorf("env %v (a // inside a string is not a comment)", s.Env)
	}
	if !slices.Equal(s.Ports, []int{8080, 5173}) {
		t.Errorf("ports %v", s.Ports)
	}
	var got []string
	for _, c := range s.Commands {
		got = append(got, c.Field+"="+c.Shell+strings.Join(c.Exec, " "))
	}
	want := []string{"onCreateCommand=make deps", "updateContentCommand.a=echo a", "updateContentCommand.b=echo b", "postCreateCommand=pip install -e . // not a comment"}
	if !slices.Equal(got, want) {
		t.Errorf("commands %q, want %q", got, want)
	}
	if len(s.Ignored) != 3 || !strings.Contains(s.Ignored[0], "devcontainer.json:12: postStartCommand is ignored") ||
		!strings.Contains(s.Ignored[2], ":14: somethingNew is not a field") {
		t.Errorf("ignored %q", s.Ignored)
	}
}

func TestParseRefusesNamingFileAndLine(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"privileged", "{\n\"image\": \"x\",\n\"privileged\": true\n}", "d.json:3: privileged: not supported: sandboxes are never privileged"},
		{"host command", "{\"image\": \"x\",\n\n \"initializeCommand\": \"rm -rf /\"}", "d.json:3: initializeCommand: not supported: it would run on the host"},
		{"mounts", "{\"image\": \"x\", \"mounts\": [\"source=/,target=/host,type=bind\"]}", "d.json:1: mounts: not supported"},
		{"features", "{\"image\": \"x\",\n\"features\": {\"ghcr.io/x/y:1\": {}}}", "d.json:2: features: not supported"},
		{"syntax", "{\n\"image\": \"x\"\n\"forwardPorts\": [1]\n}", "d.json:3: invalid character"},
		{"open comment", "{\"image\": \"x\"\n/* never closed\n}", "d.json:2: a /* comment is never closed"},
		{"given twice", "{\"image\": \"x\",\n\"image\": \"y\"}", "d.json:2: image is given twice"},
		{"wrong type", "{\"image\": \"x\",\n\"containerEnv\": [\"A=1\"]}", "d.json:2: containerEnv: want an object of strings"},
		{"variables", "{\"image\": \"x\",\n\"containerEnv\": {\"T\": \"${localEnv:TOKEN}\"}}", "d.json:2: containerEnv: T: variables"},
		{"far port", "{\"image\": \"x\",\n\"forwardPorts\": [\"db:5432\"]}", "d.json:2: forwardPorts: \"db:5432\": only the sandbox's own ports"},
		{"bad port", "{\"image\": \"x\",\n\"forwardPorts\": [0]}", "d.json:2: forwardPorts: 0 is not a port"},
		{"both", "{\"image\": \"x\",\n\"build\": {\"dockerfile\": \"D\"}}", "set image or build, not both"},
		{"neither", "{\"name\": \"x\"}", "d.json: needs image or build.dockerfile"},
		{"target", "{\"build\": {\"dockerfile\": \"D\", \"target\": \"dev\"}}", "build.target is not supported"},
		{"unknown build field", "{\"build\": {\"dockerfile\": \"D\", \"cacheFrom\": \"x\"}}", "unknown field \"cacheFrom\""},
		{"empty command", "{\"image\": \"x\",\n\"postCreateCommand\": []}", "d.json:2: postCreateCommand: empty command"},
		{"not an object", "[1]", "one JSON object"},
		{"a context outside the project", "{\"build\": {\"dockerfile\": \"D\", \"context\": \"../../..\"}}", "build.context / is outside the project /"},
		{"a Dockerfile outside the project", "{\"build\": {\"dockerfile\": \"/etc/shadow\"}}", "build.dockerfile /etc/shadow is outside the project"},
		{"an image that smuggles an instruction", "{\"image\": \"airlock/default\\nRUN id\"}", "d.json:1: image: \"airlock/default\\nRUN id\" is not an image name"},
	} {
		path := "d.json"
		if strings.Contains(c.name, "outside") {
			path = "/src/app/.devcontainer/d.json"
		}
		_, err := Parse(path, []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

func TestDockerfileForRunsCommandsAsRootThenGivesTheImageBack(t *testing.T) {
	s, err := Parse("d.json", []byte(`{"image": "airlock/python:latest", "postCreateCommand": {"a": "echo \"$HOME\"\nid", "b": ["touch", "/opt/x"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	df, base := s.DockerfileFor(nil, "10001:10001")
	want := "FROM airlock/python:latest\nUSER 0:0\nRUN [\"/bin/sh\",\"-c\",\"echo \\\"$HOME\\\"\\nid\"]\nRUN [\"touch\",\"/opt/x\"]\nUSER 10001:10001\n"
	if string(df) != want || base != 1 {
		t.Fatalf("Dockerfile (base %d):\n%s\nwant:\n%s", base, df, want)
	}
	if c, ok := s.CommandAt(4, base); !ok || c.Field != "postCreateCommand.b" {
		t.Errorf("line 4 is %+v %v", c, ok)
	}
	if _, ok := s.CommandAt(1, base); ok {
		t.Error("line 1 is the base, not a command")
	}
	df, base = Spec{}.DockerfileFor([]byte("FROM a\nRUN b"), "1:1")
	if string(df) != "FROM a\nRUN b\nUSER 1:1\n" || base != 2 {
		t.Errorf("%q %d", df, base)
	}
}
