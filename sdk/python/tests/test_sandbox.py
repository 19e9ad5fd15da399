"""The Python client against a real node: AIRLOCK_ADDR and AIRLOCK_TOKEN name it (the e2e suite
runs these with its shared node; `make test` runs the e2e suite)."""

import os
import time

import pytest

from airlock import AirlockError, Client, NotFound, Refused, TimedOut


@pytest.fixture(scope="module")
def client():
    assert os.environ.get("AIRLOCK_ADDR"), "AIRLOCK_ADDR and AIRLOCK_TOKEN must name a node"
    return Client()


@pytest.fixture
def sb(client):
    with client.sandbox(allow=["api.example.test=demo"]) as s:
        yield s


def test_the_agent_loop(client):
    with client.sandbox(allow=["api.example.test"]) as sb:
        sb.files.write("app.py", "print('hi from python')\n")
        r = sb.run("python3 app.py")
        assert r.ok and r.stdout == "hi from python\n"
        lease = sb.id
    # Released on leaving the block.
    with pytest.raises(NotFound):
        client.attach(lease)


def test_run_output_exit_code_stdin_env_cwd(sb):
    r = sb.run("echo out; echo err >&2; exit 7")
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n", "err\n")
    assert sb.run(["tr", "a-z", "A-Z"], stdin="shout\n").stdout == "SHOUT\n"
    sb.files.mkdir("sub")
    r = sb.run("pwd; echo $GREETING", cwd="/workspace/sub", env={"GREETING": "hola"})
    assert r.stdout == "/workspace/sub\nhola\n"
    seen = []
    sb.run("for i in 1 2 3; do echo $i; done", on_stdout=seen.append)
    assert b"".join(seen) == b"1\n2\n3\n"
    with pytest.raises(TimedOut) as e:
        sb.run("sleep 30", timeout=1)
    assert "timed out after 1s" in e.value.message


def test_files(sb):
    info = sb.files.write("pkg/mod.py", b"X = 1\n")
    assert info["size"] == 6 and info["path"] == "/workspace/pkg/mod.py"
    assert sb.files.read_text("pkg/mod.py") == "X = 1\n"
    entries = {e.name: e for e in sb.files.list("pkg")}
    assert entries["mod.py"].type == "file" and entries["mod.py"].size == 6 and entries["mod.py"].mtime is not None
    sb.files.move("pkg/mod.py", "pkg/renamed.py")
    assert not sb.files.exists("pkg/mod.py") and sb.files.stat("pkg/renamed.py").size == 6
    sb.files.remove("pkg", recursive=True)
    assert not sb.files.exists("pkg")
    with pytest.raises(Refused) as e:
        sb.files.read("/etc/passwd")
    assert "outside the workspace" in e.value.message
    with pytest.raises(NotFound):
        sb.files.stat("nope")


def test_processes(sb):
    p = sb.processes.start("for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 2")
    assert p.running and p.id.startswith("p-")
    out = "".join(o for o, _ in p.follow())
    assert out == "tick 1\ntick 2\ntick 3\n"
    assert p.wait(timeout=30) == 2
    long = sb.processes.start(["sleep", "300"])
    assert [q.id for q in sb.processes.list() if q.running] == [long.id]
    long.kill()
    long.wait(timeout=30)
    assert not long.running
    # A second client, as after a restart, attaches to the lease and reads the first one's output.
    again = Client().attach(sb.id).processes.get(p.id)
    assert again.read()[0] == "tick 1\ntick 2\ntick 3\n"


def test_process_input_and_terminal(sb):
    cat = sb.processes.start(["cat"], stdin=True)
    cat.send_input("one\n")
    cat.send_input(b"two\n")
    cat.close_input()
    assert cat.wait(timeout=30) == 0
    assert cat.read()[0] == "one\ntwo\n"
    # Without stdin=True the process has none to write to.
    with pytest.raises(AirlockError):
        sb.processes.start(["sleep", "30"]).send_input("x")
    sh = sb.processes.start(["bash", "--norc", "-i"], tty=True, rows=24, cols=80)
    # Resize once the shell reads its terminal (the quotes keep the typed line, which the
    # terminal echoes, from matching).
    sh.send_input("echo rea''dy\n")
    screen = ""
    for _ in range(30):
        screen += sh.read(wait=1)[0]
        if "ready" in screen:
            break
    assert "ready" in screen
    sh.resize(40, 132)
    sh.send_input("sleep 1; stty size; exit 7\n")  # the resize is applied just after it answers
    assert sh.wait(timeout=30) == 7
    assert "40 132" in sh.read()[0]


def test_lease_env_and_metadata():
    with Client().sandbox(env={"GREETING": "hello"}, metadata={"team": "ml"}) as s:
        assert s.metadata == {"team": "ml"}
        assert s.run("echo $GREETING").stdout == "hello\n"
        assert s.run("echo $GREETING", env={"GREETING": "hi"}).stdout == "hi\n"
    with pytest.raises(AirlockError) as e:
        Client().sandbox(env={"GITHUB_TOKEN": "value-zq9"})
    assert "GITHUB_TOKEN" in e.value.message and "value-zq9" not in e.value.message


def test_denied_and_explained(sb):
    r = sb.run("curl -sS http://evil.example/")
    assert "denied by rule scope-miss" in r.stdout
    ex = sb.explain("http://evil.example/")
    assert not ex.allowed and ex.rule == "scope-miss" and ex.reason in r.stdout and ex.hint
    assert sb.explain("https://api.example.test/whoami").allowed
    assert "whoami ok" in sb.run("curl -sS https://api.example.test/whoami").stdout


def test_port(sb):
    p = sb.processes.start("python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace")
    url = sb.expose_port(8000)
    assert url.startswith("http")
    p.kill()


def test_errors_name_what_is_wrong(client):
    with pytest.raises(NotFound) as e:
        client.attach("l-nope")
    assert e.value.code == "lease_not_found"
    with pytest.raises(NotFound) as e:
        client.sandbox(template="nope")
    assert e.value.code == "unknown_template"
    bad = Client(token="not-a-key")
    with pytest.raises(Exception) as e:
        bad.pools()
    assert "API key" in str(e.value)


def test_sandboxes_lists_leases(client):
    with client.sandbox(allow=["api.example.test"]) as s:
        assert s.id in [x.id for x in client.sandboxes()]
        assert s.expires is not None and s.expires.timestamp() > time.time()
