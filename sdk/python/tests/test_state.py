"""Snapshots, sandboxes from them, pause and resume, against an API on loopback that answers as
the node does (the node's own tests cover what it keeps; test_state_node.py drives a real one):
each call sends the route and body the API takes, and reads its answer whole."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airlock import AirlockError, Client, NotFound, Paused, Refused, Restored, Sandbox, Snapshot

SNAP_ID = "sha256:" + "0123456789abcdef" * 4
SNAP = {"id": SNAP_ID, "name": "green", "tenant": "acme", "template": "python", "image": "sha256:feed",
        "lease": "l-1", "created": "2026-12-03T12:00:00.123456789Z", "size": 4096, "stored": 4200, "files": 12,
        "paths": ["/tmp/cache"], "took_ms": 81}
RESTORED = {"snapshot": SNAP_ID, "files": 12, "size": 4096, "took_ms": 40}
RUNNING = {"id": "l-1", "template": "python", "task": "t-1", "address": "10.0.0.2", "state": "running",
           "expires": "2026-12-03T13:00:00Z"}
PAUSED = {"lease": "l-1", "task": "t-1", "template": "python", "kept": "files", "snapshot": "sha256:feed",
          "paused": "2026-12-03T12:00:00Z", "until": "2026-12-04T12:00:00Z", "took_ms": 300,
          "why": "runc keeps the files only"}


def refusal(status, code, message):
    return status, {"error": {"code": code, "message": message}}


# (method, path) -> (status, body); a path of "gone" is answered as the API does.
ROUTES = {
    ("POST", "/v1/leases"): (201, dict(RUNNING, id="l-2", restored=RESTORED)),
    ("GET", "/v1/leases"): (200, [RUNNING, {"id": "l-3", "template": "python", "task": "t-3", "state": "paused",
                                            "expires": "2026-12-04T12:00:00Z"}]),
    ("POST", "/v1/leases/l-1/snapshots"): (201, SNAP),
    ("POST", "/v1/leases/l-big/snapshots"): refusal(413, "too_large", "the archive holds 900 MiB; python keeps at most 512 MiB"),
    ("GET", "/v1/snapshots"): (200, [SNAP]),
    ("GET", "/v1/snapshots/green%2F1"): (200, SNAP),
    ("GET", "/v1/snapshots/gone"): refusal(404, "no_such_snapshot", "no such snapshot: gone"),
    ("DELETE", "/v1/snapshots/green"): (204, None),
    ("DELETE", "/v1/leases/l-1"): (204, None),
    ("POST", "/v1/leases/l-1/pause"): (200, PAUSED),
    ("POST", "/v1/leases/l-nostore/pause"): refusal(501, "no_snapshots", "this node keeps no snapshots"),
    ("POST", "/v1/leases/l-1/resume"): (200, dict(RUNNING, address="10.0.0.9", restored=RESTORED)),
}


@pytest.fixture
def api():
    """A loopback API answering ROUTES; yields (client, calls), calls being (method, path, body)."""
    calls = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            calls.append((self.command, self.path, json.loads(raw) if raw else None))
            assert self.headers["Authorization"] == "Bearer key-1"
            status, body = ROUTES.get((self.command, self.path), refusal(404, "not_found", "no route"))
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = answer

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    t.start()
    try:
        yield Client(addr=f"http://127.0.0.1:{srv.server_address[1]}", token="key-1"), calls
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(timeout=10)


def test_snapshot_list_show_delete(api):
    c, calls = api
    sb = _sandbox(c)
    snap = sb.snapshot(name="green", paths=["/tmp/cache"])
    assert calls[-1] == ("POST", "/v1/leases/l-1/snapshots", {"name": "green", "paths": ["/tmp/cache"]})
    assert isinstance(snap, Snapshot)
    assert (snap.id, snap.name, snap.files, snap.size, snap.stored, snap.took_ms) == (SNAP_ID, "green", 12, 4096, 4200, 81)
    assert snap.created is not None and snap.created.microsecond == 123456 and snap.paths == ["/tmp/cache"]
    sb.snapshot()
    assert calls[-1] == ("POST", "/v1/leases/l-1/snapshots", {})
    assert [s.id for s in c.snapshots()] == [SNAP_ID]
    # A name is one path segment, whatever it holds.
    assert c.snapshot("green/1").name == "green"
    assert calls[-1][1] == "/v1/snapshots/green%2F1"
    c.delete_snapshot("green")
    assert calls[-1] == ("DELETE", "/v1/snapshots/green", None)


def test_sandbox_from_a_snapshot(api):
    c, calls = api
    sb = c.sandbox(from_snapshot="green", no_caches=True, allow=["pypi.org"])
    # No template: the snapshot's.
    assert calls[-1] == ("POST", "/v1/leases", {"from": "green", "no_caches": True, "allow": ["pypi.org"]})
    assert sb.restored == Restored(snapshot=SNAP_ID, files=12, size=4096, took_ms=40)
    c.sandbox(template="python", token="jwt")
    assert calls[-1] == ("POST", "/v1/leases", {"template": "python", "token": "jwt"})
    c.sandbox(template="python", token="jwt", write_caches=True)
    assert calls[-1] == ("POST", "/v1/leases", {"template": "python", "write_caches": True, "token": "jwt"})


def test_pause_and_resume(api):
    c, calls = api
    sb = _sandbox(c)
    p = sb.pause(memory=True)
    assert calls[-1] == ("POST", "/v1/leases/l-1/pause", {"memory": True})
    assert isinstance(p, Paused) and (p.kept, p.why, p.task, p.took_ms) == ("files", "runc keeps the files only", "t-1", 300)
    assert sb.state == "paused" and sb.address == "" and sb.expires == p.until
    sb.pause()
    assert calls[-1] == ("POST", "/v1/leases/l-1/pause", {})
    assert sb.resume("jwt", ttl="1h") is sb
    assert calls[-1] == ("POST", "/v1/leases/l-1/resume", {"token": "jwt", "ttl": "1h"})
    assert sb.state == "running" and sb.address == "10.0.0.9" and sb.restored is not None and sb.restored.took_ms == 40
    again = c.resume("l-1", "jwt")
    assert calls[-1] == ("POST", "/v1/leases/l-1/resume", {"token": "jwt"}) and again.id == "l-1"


def test_a_paused_sandbox_outlives_its_with_block(api):
    c, calls = api
    with _sandbox(c) as sb:
        sb.pause()
    assert ("DELETE", "/v1/leases/l-1", None) not in calls
    with _sandbox(c):
        pass
    assert calls[-1] == ("DELETE", "/v1/leases/l-1", None)


def test_paused_sandboxes_are_listed(api):
    c, _ = api
    assert [(s.id, s.state) for s in c.sandboxes()] == [("l-1", "running"), ("l-3", "paused")]


def test_refusals(api):
    c, calls = api
    with pytest.raises(NotFound) as e:
        c.snapshot("gone")
    assert e.value.code == "no_such_snapshot"
    with pytest.raises(Refused) as e:
        _sandbox(c, "l-big").snapshot()
    assert e.value.status == 413 and "512 MiB" in e.value.message
    with pytest.raises(AirlockError) as e:
        _sandbox(c, "l-nostore").pause()
    assert (e.value.status, e.value.code) == (501, "no_snapshots")
    n = len(calls)
    with pytest.raises(Refused) as e:
        _sandbox(c).resume("")
    assert e.value.code == "token_required" and len(calls) == n


def _sandbox(c, lease="l-1"):
    """A Sandbox of lease as Client.attach would give, without asking the node."""
    return Sandbox(c, dict(RUNNING, id=lease))
