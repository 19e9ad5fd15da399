package agent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// The agent takes over a binary that imports this package when Env is set to "1", or when
// ServeArg is its one argument: it serves the node on its standard streams and exits when its
// input ends. KeepArg as the one argument makes it a keeper instead (keep.go). Env is removed from the environment first, so no command it runs inherits it.
func init() {
	if len(os.Args) == 2 && os.Args[1] == KeepArg {
		keepMain()
		os.Exit(0)
	}
	if os.Getenv(Env) != "1" && (len(os.Args) != 2 || os.Args[1] != ServeArg) {
		return
	}
	os.Unsetenv(Env)
	Serve(os.Stdin, os.Stdout)
	os.Exit(0)
}

// Serve runs the commands the frames on in ask for, writing their output and exits to out,
// until in ends or is malformed; then it kills what is still running.
func Serve(in io.Reader, out io.Writer) {
	s := &server{out: out, cmds: map[uint32]*running{}}
	r := bufio.NewReaderSize(in, 64<<10)
	var buf []byte
	for {
		f, b, err := ReadFrame(r, buf)
		buf = b
		if err != nil {
			break
		}
		switch f.Type {
		case Start:
			var c Command
			if err := json.Unmarshal(f.Payload, &c); err != nil || len(c.Argv) == 0 {
				s.fail(f.ID, "the node sent a command the agent cannot read")
				continue
			}
			if s.get(f.ID) != nil {
				// A command of an earlier connection (before a restore) still runs under it.
				s.fail(f.ID, "the agent runs a command under this id already")
				continue
			}
			s.start(f.ID, c)
		case Input:
			if rc := s.get(f.ID); rc != nil && rc.stdin != nil {
				rc.stdin.Write(f.Payload) // a command that stopped reading loses its input, as on a pipe
			}
		case InputEnd:
			if rc := s.get(f.ID); rc != nil && rc.stdin != nil {
				rc.stdin.Close()
			}
		case Kill:
			if rc := s.get(f.ID); rc != nil {
				syscall.Kill(-rc.pid, syscall.SIGKILL)
			}
		}
	}
	s.mu.Lock()
	for _, rc := range s.cmds {
		syscall.Kill(-rc.pid, syscall.SIGKILL)
	}
	s.mu.Unlock()
}

type server struct {
	wmu  sync.Mutex // one frame at a time on out
	out  io.Writer
	wbuf []byte

	mu   sync.Mutex
	cmds map[uint32]*running
}

type running struct {
	pid   int
	stdin *os.File
}

func (s *server) get(id uint32) *running {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmds[id]
}

func (s *server) send(f Frame) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf = AppendFrame(s.wbuf[:0], f)
	s.out.Write(s.wbuf)
}

func (s *server) exit(id uint32, code int) {
	s.send(Frame{Type: Exit, ID: id, Payload: binary.BigEndian.AppendUint32(nil, uint32(int32(code)))})
}

// fail reports a command that could not start: the reason on its standard error, as the
// engine's exec shows it, then exit code 127 (or 126 when it was found but cannot run).
func (s *server) fail(id uint32, why string) {
	s.send(Frame{Type: Failed, ID: id, Payload: []byte(why)})
	code := 127
	if strings.Contains(why, "permission denied") {
		code = 126
	}
	s.exit(id, code)
}

// start runs c as command id, in a process group of its own so that Kill reaches what it
// starts, and reports its output and exit. The exit is sent once the command has exited and
// its output has ended (what it left running may hold the output open, as under the engine).
func (s *server) start(id uint32, c Command) {
	env := mergeEnv(os.Environ(), c.Env)
	path, err := lookPath(c.Argv[0], envValue(env, "PATH"))
	if err != nil {
		s.fail(id, err.Error())
		return
	}
	cmd := &exec.Cmd{Path: path, Args: c.Argv, Env: env, Dir: c.Dir, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	// Pipes the agent makes itself, not exec's: exec's are closed once the command exits, and
	// what it left running may still write (the engine's streams wait for it too).
	var mine, theirs []*os.File // the agent's ends, and the command's (closed once it started)
	pipe := func(agentReads bool) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if agentReads {
			mine, theirs = append(mine, r), append(theirs, w)
			return w, nil
		}
		mine, theirs = append(mine, w), append(theirs, r)
		return r, nil
	}
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	if cmd.Stdout, err = pipe(true); err == nil {
		cmd.Stderr, err = pipe(true)
	}
	if err == nil && c.Stdin {
		cmd.Stdin, err = pipe(false)
	}
	if err == nil {
		err = cmd.Start()
	}
	closeAll(theirs)
	if err != nil {
		closeAll(mine)
		s.fail(id, err.Error())
		return
	}
	outR, errR := mine[0], mine[1]
	var inW *os.File
	if c.Stdin {
		inW = mine[2]
	}
	s.mu.Lock()
	s.cmds[id] = &running{pid: cmd.Process.Pid, stdin: inW}
	s.mu.Unlock()
	var wg sync.WaitGroup
	relay := func(r *os.File, t byte) {
		defer wg.Done()
		defer r.Close()
		b := make([]byte, chunk)
		for {
			n, err := r.Read(b)
			if n > 0 {
				s.send(Frame{Type: t, ID: id, Payload: b[:n]})
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(2)
	go relay(outR, Output)
	go relay(errR, Errors)
	go func() {
		wg.Wait()
		code := 0
		if err := cmd.Wait(); err != nil {
			code = exitCode(err)
		}
		s.mu.Lock()
		rc := s.cmds[id]
		delete(s.cmds, id)
		s.mu.Unlock()
		if rc.stdin != nil {
			rc.stdin.Close()
		}
		s.exit(id, code)
	}()
}

// exitCode is a finished command's code as the engine reports it: its own, or 128 and the
// signal that ended it.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 127
}

// mergeEnv is base with add's variables set, replacing those of the same name.
func mergeEnv(base, add []string) []string {
	if len(add) == 0 {
		return base
	}
	names := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == name {
			return v
		}
	}
	return ""
}

// lookPath finds name as the engine's exec would: a name with a slash as it is, else the first
// executable file of that name on path.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New(`exec: "` + name + `": executable file not found in $PATH`)
}
