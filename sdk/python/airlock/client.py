"""A client of airlock's HTTP API, on the standard library alone."""

from __future__ import annotations

import json
import os
import ssl
import struct
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime
from http.client import HTTPConnection, HTTPResponse, HTTPSConnection
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union

__all__ = [
    "AirlockError",
    "NotFound",
    "Refused",
    "TimedOut",
    "Client",
    "Sandbox",
    "RunResult",
    "Entry",
    "Files",
    "Process",
    "Processes",
    "Explanation",
    "Snapshot",
    "Paused",
    "Restored",
]

STREAM_STDOUT, STREAM_STDERR, STREAM_EXIT = 1, 2, 3
EXEC_HEADER = "X-Airlock-Exec"


class AirlockError(Exception):
    """An error the API returned: its HTTP status, its code and a message saying what is wrong."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status, self.code, self.message = status, code, message


class NotFound(AirlockError):
    """A lease, file or process that is not there (or not yours)."""


class Refused(AirlockError):
    """A request the node refuses: a bad request, a refused token, a limit."""


class TimedOut(AirlockError):
    """A command that ran past its timeout, killed with all it started."""


def _error(status: int, body: bytes) -> AirlockError:
    code, message = "", body.decode("utf-8", "replace").strip()
    try:
        e = json.loads(body)["error"]
        code, message = e.get("code", ""), e.get("message", message)
    except (ValueError, KeyError, TypeError):
        pass
    cls = NotFound if status == 404 else Refused if status in (400, 403, 409, 413, 429) else AirlockError
    return cls(status, code, message)


def _time(v: Optional[str]) -> Optional[datetime]:
    """Reads Go's RFC 3339 time, whose fraction may have nanoseconds (Python takes microseconds)."""
    if not v:
        return None
    v = v.replace("Z", "+00:00")
    if "." in v:
        head, rest = v.split(".", 1)
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        v = f"{head}.{rest[:i][:6]}{rest[i:]}"
    return datetime.fromisoformat(v)


class Client:
    """Calls one airlock API.

    addr and token default to AIRLOCK_ADDR and AIRLOCK_TOKEN, else to the client file a local
    `airlock up` leaves in its state dir (AIRLOCK_STATE_DIR, default ~/.local/state/airlock).
    An https API is verified against the system roots and ca_file (AIRLOCK_CA_FILE).
    """

    def __init__(self, addr: Optional[str] = None, token: Optional[str] = None,
                 ca_file: Optional[str] = None, timeout: float = 300.0) -> None:
        addr = addr or os.environ.get("AIRLOCK_ADDR")
        token = token or os.environ.get("AIRLOCK_TOKEN")
        ca_file = ca_file or os.environ.get("AIRLOCK_CA_FILE")
        if not addr:
            state = os.environ.get("AIRLOCK_STATE_DIR") or str(Path.home() / ".local" / "state" / "airlock")
            try:
                f = json.loads((Path(state) / "client.json").read_text())
            except OSError as e:
                raise AirlockError(0, "no_node", "no airlock node found: set AIRLOCK_ADDR and AIRLOCK_TOKEN, "
                                   f"or start one with 'airlock up' ({e})") from None
            addr, token = f["addr"], token or f["token"]
            ca_file = ca_file or f.get("ca")
        if not token:
            raise AirlockError(0, "no_token", "an API key is needed: set AIRLOCK_TOKEN")
        u = urllib.parse.urlsplit(addr)
        self._https = u.scheme == "https"
        self._host, self._port = u.hostname or "127.0.0.1", u.port
        self._token, self._timeout = token, timeout
        self._ssl = ssl.create_default_context(cafile=ca_file) if self._https else None

    # -- transport --------------------------------------------------------------------------

    def _conn(self) -> HTTPConnection:
        if self._https:
            return HTTPSConnection(self._host, self._port, timeout=self._timeout, context=self._ssl)
        return HTTPConnection(self._host, self._port, timeout=self._timeout)

    def _open(self, method: str, path: str, body: Union[bytes, None] = None,
              headers: Optional[dict[str, str]] = None) -> tuple[HTTPConnection, HTTPResponse]:
        h = {"Authorization": f"Bearer {self._token}"}
        h.update(headers or {})
        c = self._conn()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        if r.status >= 300:
            data = r.read()
            c.close()
            raise _error(r.status, data)
        return c, r

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        c, r = self._open(method, path, data, {"Content-Type": "application/json"} if data else None)
        try:
            raw = r.read()
        finally:
            c.close()
        return json.loads(raw) if raw.strip() else None

    # -- the API ----------------------------------------------------------------------------

    def sandbox(self, template: Optional[str] = None, allow: Sequence[str] = (), profiles: Sequence[str] = (),
                token: Optional[str] = None, ttl: Optional[str] = None,
                env: Optional[dict[str, str]] = None, metadata: Optional[dict[str, str]] = None,
                from_snapshot: Optional[str] = None, no_caches: bool = False,
                write_caches: bool = False) -> "Sandbox":
        """Leases a sandbox: allow names hosts (HOST[:PORT][=CREDENTIAL]) the dev issuer puts in a
        minted token, profiles names scope bundles (pypi, npm, ...); or token is a task JWT. env is
        set for every command of the lease (never a secret: such names and values are refused);
        metadata labels it. from_snapshot (a snapshot's id or name) restores its workspace before
        the sandbox is returned (sb.restored says what, and how long it took); template then
        defaults to the snapshot's, else to "default". no_caches starts with the template's caches
        empty; write_caches writes them back when the lease ends (released or expired, not
        paused), for your next sandboxes of the template: what this one leaves there, they run."""
        req: dict[str, Any] = {}
        if template:
            req["template"] = template
        if from_snapshot:
            req["from"] = from_snapshot
        if no_caches:
            req["no_caches"] = True
        if write_caches:
            req["write_caches"] = True
        if env:
            req["env"] = env
        if metadata:
            req["metadata"] = metadata
        if token:
            req["token"] = token
        else:
            req["allow"] = list(allow) + ["@" + p.lstrip("@") for p in profiles]
        if ttl:
            req["ttl"] = ttl
        return Sandbox(self, self._call("POST", "/v1/leases", req))

    def attach(self, lease: str) -> "Sandbox":
        """The sandbox of an existing lease of yours (another process's, or one from before a restart)."""
        return Sandbox(self, self._call("GET", f"/v1/leases/{_q(lease)}"))

    def sandboxes(self) -> list["Sandbox"]:
        """Your sandboxes, running and paused (sb.state)."""
        return [Sandbox(self, v) for v in self._call("GET", "/v1/leases")]

    def resume(self, lease: str, token: str, ttl: Optional[str] = None) -> "Sandbox":
        """Resumes a paused lease of yours (Sandbox.resume, for one you hold no Sandbox of)."""
        return Sandbox(self, self._call("POST", f"/v1/leases/{_q(lease)}/resume", _resume_request(token, ttl)))

    def snapshots(self) -> list["Snapshot"]:
        """Your snapshots, newest first."""
        return [Snapshot.of(v) for v in self._call("GET", "/v1/snapshots")]

    def snapshot(self, ref: str) -> "Snapshot":
        """One of your snapshots, by id ("sha256:...") or name."""
        return Snapshot.of(self._call("GET", f"/v1/snapshots/{_q(ref)}"))

    def delete_snapshot(self, ref: str) -> None:
        """Deletes one of your snapshots; sandboxes started from it keep what they restored."""
        self._call("DELETE", f"/v1/snapshots/{_q(ref)}")

    def pools(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/pools")


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _resume_request(token: str, ttl: Optional[str]) -> dict[str, Any]:
    if not token:
        raise Refused(0, "token_required", "a task token for the paused lease's task is required: a paused lease keeps none")
    req = {"token": token}
    if ttl:
        req["ttl"] = ttl
    return req


@dataclass
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = field(repr=False, default=b"")
    stderr_bytes: bytes = field(repr=False, default=b"")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class Entry:
    path: str
    name: str
    type: str  # file, dir, symlink or other
    size: int
    mode: str
    mtime: Optional[datetime]
    link: str = ""

    @classmethod
    def of(cls, v: dict[str, Any]) -> "Entry":
        return cls(path=v["path"], name=v["name"], type=v["type"], size=v["size"], mode=v["mode"],
                   mtime=_time(v.get("mtime")), link=v.get("link", ""))


@dataclass
class Explanation:
    decision: str
    rule: str
    reason: str
    hint: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def allowed(self) -> bool:
        return self.decision == "allow"


@dataclass
class Restored:
    """What a sandbox from a snapshot, or a resumed one, started with, and how long that took;
    kept is what came back ("files", or "memory+files" for a resume of a pause that kept memory:
    its processes run on)."""
    snapshot: str
    files: int
    size: int
    took_ms: int
    kept: str = ""

    @classmethod
    def of(cls, v: Optional[dict[str, Any]]) -> Optional["Restored"]:
        if not v:
            return None
        return cls(snapshot=v["snapshot"], files=v.get("files", 0), size=v.get("size", 0), took_ms=v.get("took_ms", 0),
                   kept=v.get("kept", ""))


@dataclass
class Snapshot:
    """A snapshot of a workspace: content-addressed (id is "sha256:" and the archive's digest),
    your tenant's, holding no credential. size is the archive's, stored what the store holds
    (encrypted); took_ms is set on the answer of Sandbox.snapshot."""
    id: str
    name: str
    template: str
    image: str
    lease: str
    created: Optional[datetime]
    size: int
    stored: int
    files: int
    paths: list[str] = field(default_factory=list)
    took_ms: int = 0

    @classmethod
    def of(cls, v: dict[str, Any]) -> "Snapshot":
        return cls(id=v["id"], name=v.get("name", ""), template=v.get("template", ""), image=v.get("image", ""),
                   lease=v.get("lease", ""), created=_time(v.get("created")), size=v.get("size", 0),
                   stored=v.get("stored", 0), files=v.get("files", 0), paths=v.get("paths") or [],
                   took_ms=v.get("took_ms", 0))


@dataclass
class Paused:
    """The answer of a pause: kept is "files" or "memory+files"; why says why memory was not kept
    when it was asked for; until is when the paused lease is released unless resumed."""
    lease: str
    task: str
    template: str
    kept: str
    snapshot: str
    paused: Optional[datetime]
    until: Optional[datetime]
    took_ms: int = 0
    why: str = ""

    @classmethod
    def of(cls, v: dict[str, Any]) -> "Paused":
        return cls(lease=v["lease"], task=v.get("task", ""), template=v.get("template", ""), kept=v.get("kept", ""),
                   snapshot=v.get("snapshot", ""), paused=_time(v.get("paused")), until=_time(v.get("until")),
                   took_ms=v.get("took_ms", 0), why=v.get("why", ""))


class Sandbox:
    """A leased sandbox. As a context manager it is released on exit, unless it is paused then
    (its release would delete what the pause kept)."""

    def __init__(self, client: Client, view: dict[str, Any]) -> None:
        self._c = client
        self.id: str = view["id"]
        self.files = Files(self)
        self.processes = Processes(self)
        self._view(view)

    def _view(self, view: dict[str, Any]) -> None:
        self.template: str = view.get("template", "")
        self.task: str = view.get("task", "")
        self.address: str = view.get("address", "")
        self.expires: Optional[datetime] = _time(view.get("expires"))
        self.metadata: dict[str, str] = view.get("metadata") or {}
        # "running" or "paused" (a paused lease has no address; expires is when it is released).
        self.state: str = view.get("state") or "running"
        self.restored: Optional[Restored] = Restored.of(view.get("restored"))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state != "paused":
            self.release()

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, template={self.template!r})"

    @property
    def _base(self) -> str:
        return f"/v1/leases/{_q(self.id)}"

    def run(self, cmd: Union[str, Sequence[str]], stdin: Union[str, bytes, None] = None,
            timeout: Optional[float] = None, cwd: Optional[str] = None, env: Optional[dict[str, str]] = None,
            on_stdout: Optional[Callable[[bytes], None]] = None,
            on_stderr: Optional[Callable[[bytes], None]] = None) -> RunResult:
        """Runs cmd (a shell line, or a program and its arguments) and waits for it. Output is
        passed to on_stdout and on_stderr as it comes, and returned whole."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        req: dict[str, Any] = {"cmd": argv}
        if timeout:
            req["timeout"] = f"{timeout}s"
        if cwd:
            req["workdir"] = cwd
        if env:
            req["env"] = env
        if stdin is None:
            c, r = self._c._open("POST", self._base + "/exec", json.dumps(req).encode(), {"Content-Type": "application/json"})
        else:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            c, r = self._c._open("POST", self._base + "/exec", data, {EXEC_HEADER: json.dumps(req)})
        out, err = bytearray(), bytearray()
        try:
            while True:
                hdr = r.read(8)
                if len(hdr) < 8:
                    raise AirlockError(0, "stream_cut", "the exec stream ended without an exit status")
                kind, n = hdr[0], struct.unpack(">I", hdr[4:])[0]
                chunk = r.read(n)
                if kind == STREAM_STDOUT:
                    out += chunk
                    if on_stdout:
                        on_stdout(chunk)
                elif kind == STREAM_STDERR:
                    err += chunk
                    if on_stderr:
                        on_stderr(chunk)
                elif kind == STREAM_EXIT:
                    st = json.loads(chunk)
                    if st.get("error"):
                        code = st.get("code", "")
                        cls = TimedOut if code == "timed_out" else NotFound if code == "lease_not_found" else AirlockError
                        raise cls(0, code, st["error"])
                    return RunResult(st["exit_code"], out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                                     bytes(out), bytes(err))
                else:
                    raise AirlockError(0, "stream_bad", f"unknown exec frame {kind}")
        finally:
            c.close()

    def expose_port(self, port: int) -> str:
        """A URL, on a listener of its own, that reaches port of the sandbox until release."""
        return self._c._call("POST", self._base + "/ports", {"port": port})["url"]

    def explain(self, url: str, method: str = "GET") -> Explanation:
        """What the gateway decides for a request of this sandbox's task, and what would allow it."""
        v = self._c._call("POST", "/v1/explain", {"lease": self.id, "url": url, "method": method})
        return Explanation(v["decision"], v["rule"], v["reason"], v.get("hint", ""), v)

    def renew(self, ttl: Optional[str] = None) -> None:
        v = self._c._call("POST", self._base + "/renew", {"ttl": ttl} if ttl else {})
        self.expires = _time(v.get("expires"))

    def snapshot(self, name: Optional[str] = None, paths: Sequence[str] = ()) -> Snapshot:
        """Snapshots the workspace while the sandbox runs, and each path in paths (writable paths
        besides the workspace that the template declares for snapshots). Client.sandbox's
        from_snapshot takes its id or name."""
        req: dict[str, Any] = {}
        if name:
            req["name"] = name
        if paths:
            req["paths"] = list(paths)
        return Snapshot.of(self._c._call("POST", self._base + "/snapshots", req))

    def pause(self, memory: bool = False) -> Paused:
        """Releases the sandbox's compute and network access and keeps its files (with memory,
        its running processes too, where the node's runtime can: the answer's kept and why say).
        Every credential minted for it is revoked; resume needs a task token for its task."""
        p = Paused.of(self._c._call("POST", self._base + "/pause", {"memory": True} if memory else {}))
        self.state, self.address, self.expires = "paused", "", p.until
        return p

    def resume(self, token: str, ttl: Optional[str] = None) -> "Sandbox":
        """Brings the paused sandbox back in a new container, bound to token: a task token for its
        task (a paused lease keeps none). self.restored says what was restored and how long it
        took. Returns self."""
        self._view(self._c._call("POST", self._base + "/resume", _resume_request(token, ttl)))
        return self

    def release(self) -> None:
        """Destroys the sandbox and everything in it (of a paused one, what its pause kept);
        releasing one already gone is not an error."""
        try:
            self._c._call("DELETE", self._base)
        except NotFound:
            pass


class Files:
    """The sandbox's workspace: paths are relative to it, or absolute inside it."""

    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def _path(self, op: str, path: str, **q: Any) -> str:
        params = {"path": path, **{k: v for k, v in q.items() if v is not None}}
        return f"{self._sb._base}/{op}?{urllib.parse.urlencode(params)}"

    def write(self, path: str, data: Union[str, bytes]) -> dict[str, Any]:
        body = data.encode() if isinstance(data, str) else data
        c, r = self._sb._c._open("PUT", self._path("files", path), body, {"Content-Type": "application/octet-stream"})
        try:
            return json.loads(r.read())
        finally:
            c.close()

    def read(self, path: str) -> bytes:
        c, r = self._sb._c._open("GET", self._path("files", path))
        try:
            return r.read()
        finally:
            c.close()

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8", "replace")

    def list(self, path: str = "", depth: int = 1) -> list[Entry]:
        v = self._sb._c._call("GET", self._path("fs/list", path, depth=depth))
        return [Entry.of(e) for e in v["entries"]]

    def stat(self, path: str) -> Entry:
        return Entry.of(self._sb._c._call("GET", self._path("fs/stat", path)))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except NotFound:
            return False

    def mkdir(self, path: str) -> None:
        self._sb._c._call("POST", self._sb._base + "/fs/mkdir", {"path": path})

    def remove(self, path: str, recursive: bool = False) -> None:
        self._sb._c._call("POST", self._sb._base + "/fs/remove", {"path": path, "recursive": recursive})

    def move(self, src: str, dst: str, overwrite: bool = False) -> None:
        self._sb._c._call("POST", self._sb._base + "/fs/move", {"from": src, "to": dst, "overwrite": overwrite})


class Process:
    """A background process: it runs on after the call that started it."""

    def __init__(self, sb: Sandbox, info: dict[str, Any]) -> None:
        self._sb = sb
        self.id: str = info["id"]
        self.cmd: list[str] = info["cmd"]
        self._info = info
        self._out = self._err = 0

    def __repr__(self) -> str:
        return f"Process({self.id!r}, running={self.running})"

    def _update(self, info: dict[str, Any]) -> None:
        self._info = info

    @property
    def running(self) -> bool:
        return bool(self._info.get("running"))

    @property
    def exit_code(self) -> Optional[int]:
        return self._info.get("exit_code")

    def read(self, wait: float = 0, stdout_offset: Optional[int] = None,
             stderr_offset: Optional[int] = None) -> tuple[str, str]:
        """What it wrote since the last read (or from the offsets given), waiting up to wait
        seconds for something new while it runs."""
        q = {"stdout_offset": self._out if stdout_offset is None else stdout_offset,
             "stderr_offset": self._err if stderr_offset is None else stderr_offset}
        if wait:
            q["wait"] = f"{min(wait, 60)}s"
        v = self._sb._c._call("GET", f"{self._sb._base}/processes/{_q(self.id)}/output?{urllib.parse.urlencode(q)}")
        self._out, self._err = v["stdout_offset"], v["stderr_offset"]
        self._update(v["process"])
        return v["stdout"], v["stderr"]

    def follow(self) -> Iterator[tuple[str, str]]:
        """Yields output as it comes until the process ends."""
        while True:
            out, err = self.read(wait=30)
            if out or err:
                yield out, err
            elif not self.running:
                return

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Waits for it to end (at most timeout seconds; None: until it does) and returns its
        exit code (None if it still runs, or ended without one)."""
        left = timeout
        while True:
            step = 60 if left is None else min(left, 60)
            info = self._sb._c._call("GET", f"{self._sb._base}/processes/{_q(self.id)}/wait?timeout={step}s")
            self._update(info)
            if not self.running:
                return self.exit_code
            if left is not None:
                left -= step
                if left <= 0:
                    return None

    def kill(self, signal: str = "TERM") -> None:
        self._sb._c._call("POST", f"{self._sb._base}/processes/{_q(self.id)}/signal", {"signal": signal})

    def send_input(self, data: Union[str, bytes]) -> None:
        """Writes data to its stdin (started with stdin=True or tty=True); at most 1 MiB a call."""
        body = data.encode() if isinstance(data, str) else bytes(data)
        c, r = self._sb._c._open("POST", f"{self._sb._base}/processes/{_q(self.id)}/stdin", body,
                                 {"Content-Type": "application/octet-stream"})
        r.read()
        c.close()

    def close_input(self) -> None:
        """Closes its stdin, so a program reading it sees the end."""
        self._sb._c._call("DELETE", f"{self._sb._base}/processes/{_q(self.id)}/stdin")

    def resize(self, rows: int, cols: int) -> None:
        """Sets the size of its terminal (started with tty=True)."""
        self._sb._c._call("POST", f"{self._sb._base}/processes/{_q(self.id)}/resize", {"rows": rows, "cols": cols})


class Processes:
    def __init__(self, sb: Sandbox) -> None:
        self._sb = sb

    def start(self, cmd: Union[str, Sequence[str]], cwd: Optional[str] = None,
              env: Optional[dict[str, str]] = None, timeout: Optional[float] = None,
              stdin: bool = False, tty: bool = False, rows: int = 0, cols: int = 0) -> Process:
        """Starts cmd in the background. stdin=True keeps its stdin open for send_input; tty=True
        runs it on a terminal of rows by cols (its output is all stdout, its stdin always open)."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        req: dict[str, Any] = {"cmd": argv}
        if stdin:
            req["stdin"] = True
        if tty:
            req.update(tty=True, rows=rows, cols=cols)
        if cwd:
            req["workdir"] = cwd
        if env:
            req["env"] = env
        if timeout:
            req["timeout"] = f"{timeout}s"
        return Process(self._sb, self._sb._c._call("POST", self._sb._base + "/processes", req))

    def list(self) -> list[Process]:
        return [Process(self._sb, p) for p in self._sb._c._call("GET", self._sb._base + "/processes")]

    def get(self, pid: str) -> Process:
        for p in self.list():
            if p.id == pid:
                return p
        raise NotFound(404, "no_such_process", f"lease {self._sb.id} has no process {pid}")

