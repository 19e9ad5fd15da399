"""Snapshots, a sandbox from one, and pause against a real node, as test_sandbox.py (the e2e
suite runs these with its shared node). A node that keeps no snapshots skips them, saying so."""

import os
import uuid

import pytest

from airlock import AirlockError, Client, NotFound, Refused


@pytest.fixture(scope="module")
def client():
    assert os.environ.get("AIRLOCK_ADDR"), "AIRLOCK_ADDR and AIRLOCK_TOKEN must name a node"
    return Client()


def _or_skip(call):
    try:
        return call()
    except AirlockError as e:
        if e.code == "no_snapshots":
            pytest.skip(f"the node keeps no snapshots: {e.message}")
        raise


def test_snapshot_and_fork(client):
    name = "py-" + uuid.uuid4().hex[:12]
    with client.sandbox(allow=["api.example.test"]) as sb:
        sb.files.write("notes/plan.txt", "step 1\n")
        snap = _or_skip(lambda: sb.snapshot(name=name))
    assert snap.id.startswith("sha256:") and snap.name == name and snap.lease == sb.id and snap.files >= 1
    assert snap.id in [s.id for s in client.snapshots()]
    assert client.snapshot(name).id == snap.id
    # Two sandboxes from it, each with what it held.
    for _ in range(2):
        with client.sandbox(from_snapshot=name, allow=["api.example.test"]) as fork:
            assert fork.restored is not None and fork.restored.snapshot == snap.id and fork.restored.files >= 1
            assert fork.template == snap.template
            assert fork.files.read_text("notes/plan.txt") == "step 1\n"
    client.delete_snapshot(snap.id)
    with pytest.raises(NotFound) as e:
        client.snapshot(snap.id)
    assert e.value.code == "no_such_snapshot"


def test_pause_is_listed_and_resume_wants_its_token(client):
    sb = client.sandbox(allow=["api.example.test"])
    try:
        sb.files.write("kept.txt", "kept\n")
        p = _or_skip(lambda: sb.pause(memory=True))
        assert p.lease == sb.id and p.kept in ("files", "memory+files") and p.until is not None
        if p.kept == "files":
            assert p.why, "memory was asked for and not kept: the answer says why"
        assert (sb.id, "paused") in [(s.id, s.state) for s in client.sandboxes()]
        assert client.attach(sb.id).state == "paused"
        # A paused lease keeps no token: one that is not a task token of its task is refused.
        with pytest.raises(Refused):
            sb.resume("not-a-task-token")
    finally:
        sb.release()
    with pytest.raises(NotFound):
        client.attach(sb.id)
