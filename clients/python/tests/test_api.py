"""The package's public API against a real daemon: every protocol method through its typed
method, the asyncio client with its event iterator and async hooks, `compact(write=False)`,
errors, binary and socket discovery, and the install from a fresh venv (README example and
examples/agent_loop.py). Binary and sessions: see conftest.py.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BIN, IN_CI, MODEL, PKG_DIR, REPO, lines, missing, open_small_keep, require_binary_and_cases, session_copy

require_binary_and_cases()

import compactd_client  # noqa: E402
from compactd_client import (  # noqa: E402
    AsyncClient,
    BinaryNotFound,
    Client,
    CompactdError,
    DaemonNotRunning,
    Methods,
    default_socket_path,
    find_binary,
)


def snake(name):
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def test_every_protocol_method_has_a_typed_method():
    doc = json.loads((REPO / "proto-docs" / "openrpc.json").read_text())
    names = [m["name"] for m in doc["methods"]]
    assert len(names) >= 22
    absent = [n for n in names if not callable(getattr(Methods, snake(n), None))]
    assert absent == [], f"protocol methods without a typed method: {absent}"
    # Each typed method names exactly one protocol method, so nothing stale lingers either.
    src = Path(compactd_client._methods.__file__).read_text()
    called = re.findall(r'self\._call\("(\w+)"', src)
    assert sorted(called) == sorted(names)


def test_result_types_are_generated_from_openrpc_and_annotate_every_method():
    check = subprocess.run([sys.executable, str(REPO / "clients" / "generate.py"), "--check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    doc = json.loads((REPO / "proto-docs" / "openrpc.json").read_text())
    for m in doc["methods"]:
        method = getattr(Methods, snake(m["name"]))
        assert method.__annotations__["return"] == m["result"]["name"], m["name"]
        assert hasattr(compactd_client.types, m["result"]["name"]), m["result"]["name"]
    assert compactd_client.types.RESULTS["compact"] == "CompactionResult"


#: A method the daemon does not have, as `COMPACTD_BLESS=1 cargo test --test openrpc` would
#: write it into openrpc.json after one line in `rpc::methods` (a task, so it waits long).
NEW_METHOD = {
    "name": "echoNote",
    "summary": "A method added to the Rust list.",
    "paramStructure": "by-name",
    "params": [
        {"name": "sessionId", "required": True, "schema": {"type": "string"}},
        {"name": "noteText", "required": False, "schema": {"type": ["string", "null"]}},
    ],
    "result": {"name": "EchoNoteResult", "schema": {"$ref": "#/components/schemas/EchoNoteResult"}},
    "errors": [],
    "x-run": "task",
}


def with_new_method(tmp_path):
    """openrpc.json with `NEW_METHOD` (and its result schema) added, and a copy of the clients."""
    doc = json.loads((REPO / "proto-docs" / "openrpc.json").read_text())
    doc["methods"].append(NEW_METHOD)
    doc["components"]["schemas"]["EchoNoteResult"] = {
        "type": "object",
        "properties": {"echoed": {"type": "string"}},
        "required": ["echoed"],
    }
    path = tmp_path / "openrpc.json"
    path.write_text(json.dumps(doc))
    clients = tmp_path / "clients"
    shutil.copytree(PKG_DIR / "compactd_client", clients / "python" / "compactd_client")
    (clients / "typescript" / "src").mkdir(parents=True)
    gen = subprocess.run(
        [sys.executable, str(REPO / "clients" / "generate.py"), "--doc", str(path), "--clients", str(clients)],
        capture_output=True,
        text=True,
    )
    assert gen.returncode == 0, gen.stderr
    return clients


def test_a_new_method_needs_no_hand_written_client_code(tmp_path):
    clients = with_new_method(tmp_path)
    # Only generated files change: every hand-written module of the package is as committed.
    for f in (PKG_DIR / "compactd_client").glob("*.py"):
        if f.name not in ("types.py", "_methods.py"):
            assert (clients / "python" / "compactd_client" / f.name).read_text() == f.read_text(), f.name
    probe = f"""
import inspect, sys
sys.path.insert(0, {str(clients / "python")!r})
import compactd_client
assert compactd_client.__file__.startswith({str(clients)!r}), compactd_client.__file__
calls = []
class Fake(compactd_client.Methods):
    def _call(self, method, params=None, timeout=None):
        calls.append((method, params, timeout))
        return {{"echoed": "x"}}
Fake().echo_note("s1", note_text="hi")
Fake().echo_note("s2")
print(calls)
print(inspect.signature(compactd_client.Methods.echo_note))
print(compactd_client.types.RESULTS["echoNote"], list(compactd_client.types.EchoNoteResult.__annotations__))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    calls, signature, result = out.stdout.splitlines()
    assert calls == "[('echoNote', {'sessionId': 's1', 'noteText': 'hi'}, 600.0), ('echoNote', {'sessionId': 's2'}, 600.0)]"
    assert signature == "(self, session_id: 'str', note_text: 'Optional[str]' = None, timeout: 'Optional[float]' = 600.0) -> 'EchoNoteResult'"
    assert result == "EchoNoteResult ['echoed']"
    # And the TypeScript bindings gained it too (the node suite runs them).
    index = (clients / "typescript" / "src" / "index.js").read_text()
    assert 'echoNote(sessionId, options = {}) {\n    return this._call("echoNote", { ...options, sessionId });' in index
    dts = (clients / "typescript" / "src" / "index.d.ts").read_text()
    assert "  echoNote(sessionId: string, options?: {\n    noteText?: string | null;\n  }): Promise<EchoNoteResult>;" in dts
    assert "export interface EchoNoteResult {\n  echoed: string;\n}" in dts


def test_connect_or_start_starts_one_daemon_and_then_joins_it(env, tmp_path, monkeypatch):
    sock = str(tmp_path / "run" / "shared" / "compactd.sock")
    log = tmp_path / "state" / "compactd" / "compactd.log"
    for k in ("XDG_RUNTIME_DIR", "COMPACTD_RUNTIME_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "PI_CODING_AGENT_DIR"):
        monkeypatch.setenv(k, env[k])
    try:
        with Client.connect_or_start(sock, bin=BIN, env=env) as a:
            path = session_copy(tmp_path, "005-medium-basic")
            sid = a.open_session(path)["sessionId"]

            async def join():
                c = await AsyncClient.connect_or_start(sock, bin=BIN, env=env)
                try:
                    return await c.list_sessions()
                finally:
                    await c.close()

            assert [s["sessionId"] for s in asyncio.run(join())] == [sid], "joined the same daemon"
        with Client.connect_or_start(sock, bin=BIN, env=env) as b:
            # The daemon outlived its clients; their holds are released once it saw them go.
            deadline = time.time() + 10
            while b.list_sessions() and time.time() < deadline:
                time.sleep(0.02)
            assert b.list_sessions() == []
        assert os.path.exists(sock)
    finally:
        # Stop the daemon this test started (found by its socket in /proc).
        for pid in os.listdir("/proc"):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and sock.encode() in cmd:
                os.kill(int(pid), signal.SIGTERM)
    assert "listening" in log.read_text(), "the started daemon logs to its file"


def test_the_daemons_stderr_and_log_lines_reach_the_compactd_logger(env, caplog, tmp_path):
    import logging

    caplog.set_level(logging.DEBUG, logger="compactd")
    bad = Client.spawn_stdio(BIN, ["--max-frame", "lots"], env=env)
    bad.close()
    assert bad.process.returncode == 2
    errors = [r for r in caplog.records if r.name == "compactd" and r.levelno == logging.ERROR]
    assert any("lots" in r.getMessage() for r in errors), [r.getMessage() for r in caplog.records]
    caplog.clear()
    with Client.spawn_stdio(BIN, env=env) as c:
        c.forward_daemon_log()
        path = session_copy(tmp_path, "005-medium-basic")
        c.open_session(path)
        deadline = time.time() + 10
        while not any("session opened" in r.getMessage() for r in caplog.records) and time.time() < deadline:
            time.sleep(0.02)
    infos = [r.getMessage() for r in caplog.records if r.name == "compactd" and r.levelno == logging.INFO]
    assert any("session opened" in m and path in m for m in infos), infos
    assert not [r for r in caplog.records if r.name == "compactd" and r.levelno >= logging.ERROR]


def test_every_method_through_the_blocking_client(stdio, tmp_path):
    c = stdio()
    init = c.initialize("pytest")
    assert init["serverName"] == "compactd" and "session_before_compact" in init["capabilities"]["hooks"]
    work = tmp_path / "project"
    work.mkdir()
    info = c.create_session(str(work), session_dir=str(tmp_path / "sessions"), model=MODEL, thinking_level="low")
    sid = info["sessionId"]
    assert info["persisted"] is False and info["thinkingLevel"] == "low"
    assert [s["sessionId"] for s in c.list_sessions()] == [sid]
    assert c.get_settings(sid)["compaction"]["enabled"] is True
    assert c.set_settings_overrides(sid, {"keepRecentTokens": 100}) == {"ok": True}
    assert c.get_settings(sid)["compaction"]["keepRecentTokens"] == 100
    first = c.append_message(sid, {"role": "user", "content": "first question " * 50})
    c.append_message(sid, {"role": "assistant", "content": [{"type": "text", "text": "first answer " * 50}],
                           "provider": MODEL["provider"], "model": MODEL["id"], "stopReason": "stop",
                           "usage": {"input": 300, "output": 100, "totalTokens": 400}})
    assert c.get_context_usage(sid)["tokens"] == 400
    label = c.append_entry(sid, {"type": "label", "targetId": first["entryId"], "label": "start"})
    switched = c.set_model(sid, dict(MODEL, id="other-model"))
    assert switched["leafId"] == switched["entryId"]
    with pytest.raises(CompactdError) as e:
        c.append_message(sid, {"role": "user", "content": "late"}, expected_leaf_id=label["entryId"])
    assert e.value.kind == "leaf_moved" and e.value.code == -32021
    c.append_message(sid, {"role": "user", "content": "second question " * 50})
    branch = c.get_branch(sid)
    assert [e["type"] for e in branch][-3:] == ["label", "model_change", "message"]
    assert c.get_context(sid, format="llm")["messages"][0]["role"] == "user"
    assert c.should_compact(context_tokens=190000, context_window=200000)["shouldCompact"] is True
    assert c.should_compact(sid)["shouldCompact"] is False
    preview = c.preview_compaction(sid, detail="full")
    assert "nothingToCompact" not in preview, preview
    assert preview["summarize"]["count"] + preview["turnPrefix"]["count"] >= 1, preview
    assert c.check_compaction(sid, "prePrompt")["action"] == "none"
    assert c.abort_compaction(sid) == {"aborted": False, "speculationDiscarded": False}
    assert c.subscribe(sid, events=["compaction_end"]) == {"subscribed": True}
    assert c.register_hooks(["session_compact"], session_id=sid) == {"registered": True}
    result = c.compact(sid, custom_instructions="Focus on the questions.")
    assert result["firstKeptEntryId"] == preview["firstKeptEntryId"]
    assert c.notifications("compaction_end")[-1]["result"] == result
    assert c.notifications("session_compact")[-1]["compactionEntry"]["summary"] == result["summary"]
    assert c.notifications("compaction_start") == [], "only the subscribed events arrive"
    nav = c.navigate_tree(sid, target_id=first["entryId"])
    assert nav["cancelled"] is False and nav["editorText"].startswith("first question")
    assert c.unsubscribe() == {"unsubscribed": True}
    assert c.close_session(sid) == {"closed": True}
    assert c.list_sessions() == []


def test_errors_carry_code_kind_and_pis_message(stdio, tmp_path):
    c = stdio()
    path = session_copy(tmp_path, "005-medium-basic")
    sid = open_small_keep(c, path)["sessionId"]
    c.compact(sid)
    with pytest.raises(CompactdError) as e:
        c.compact(sid)
    assert (e.value.code, e.value.kind, e.value.message) == (-32011, "already_compacted", "Already compacted")
    with pytest.raises(CompactdError) as e:
        c.open_session(str(tmp_path / "missing.jsonl"))
    assert e.value.kind == "not_found" and "missing.jsonl" in e.value.message
    assert isinstance(e.value, compactd_client.RpcError)


def test_compact_write_false_returns_the_compaction_and_appends_nothing(stdio, tmp_path):
    c = stdio()
    path = session_copy(tmp_path, "005-medium-basic")
    before = Path(path).read_bytes()
    sid = open_small_keep(c, path)["sessionId"]
    stream = c.events(session_id=sid)
    c.subscribe(sid)
    c.register_hooks(["session_compact"], session_id=sid)
    dry = c.compact(sid, write=False)
    got = [stream.next_event(10), stream.next_event(10)]
    stream.close()
    assert [e.name for e in got] == ["compaction_start", "compaction_end"]
    assert got[1].params["result"] == dry
    assert Path(path).read_bytes() == before, "write: false appends nothing"
    assert c.notifications("compaction_start") == [{"sessionId": sid, "reason": "manual"}]
    assert c.notifications("compaction_end")[-1]["result"] == dry
    assert c.notifications("session_compact") == [], "no entry, so no session_compact"
    assert "## Goal" in dry["summary"] and dry["details"]["summarizer"] == "extractive"
    assert 0 < dry["estimatedTokensAfter"] < dry["tokensBefore"]
    assert c.get_context(sid)["messages"][0]["role"] != "compactionSummary", "the daemon's view is unchanged"
    # The same compaction, written: identical summary and cut; the estimate matches the real one.
    real = c.compact(sid)
    assert {k: real[k] for k in ("summary", "firstKeptEntryId", "tokensBefore", "estimatedTokensAfter")} == {
        k: dry[k] for k in ("summary", "firstKeptEntryId", "tokensBefore", "estimatedTokensAfter")
    }
    assert lines(path)[-1]["type"] == "compaction"


def test_blocking_client_runs_an_async_hook_handler(stdio, tmp_path):
    c = stdio()
    path = session_copy(tmp_path, "005-medium-basic")
    sid = open_small_keep(c, path)["sessionId"]

    async def cancel(params):
        await asyncio.sleep(0.01)
        return {"cancel": True}

    c.on_hook("session_before_compact", cancel, session_id=sid)
    with pytest.raises(CompactdError) as e:
        c.compact(sid)
    assert e.value.kind == "cancelled" and e.value.message == "Compaction cancelled"
    assert lines(path)[-1]["type"] != "compaction"


def test_async_client_methods_event_iterator_and_async_hook(env, tmp_path):
    path = session_copy(tmp_path, "005-medium-basic")

    async def scenario():
        async with await AsyncClient.spawn_stdio(BIN, env=env) as c:
            info = await c.open_session(path, model=MODEL)
            sid = info["sessionId"]
            await c.set_settings_overrides(sid, {"keepRecentTokens": 2000})
            stream = c.events(session_id=sid)
            callback_seen = []
            c.on("compaction_start", lambda p: callback_seen.append(p["reason"]))
            await c.subscribe(sid)
            asked = []

            async def before_compact(params):
                await asyncio.sleep(0.05)  # an async hook may await other work
                asked.append(params["reason"])
                prep = params["preparation"]
                return {"compaction": {"summary": "Summary from the hook.", "firstKeptEntryId": prep["firstKeptEntryId"],
                                       "tokensBefore": prep["tokensBefore"], "details": {"by": "hook"}}}

            assert await c.on_hook("session_before_compact", before_compact, session_id=sid) == {"registered": True}
            result = await c.compact(sid)
            names = [(await stream.next_event(10)).name for _ in range(2)]
            stream.close()
            with pytest.raises(CompactdError) as e:
                await c.compact(sid)
            return result, names, asked, callback_seen, e.value

    result, names, asked, callback_seen, err = asyncio.run(scenario())
    assert result["summary"] == "Summary from the hook." and result["details"] == {"by": "hook"}
    assert names == ["compaction_start", "compaction_end"]
    assert asked == ["manual"] and callback_seen == ["manual", "manual"]
    assert err.kind == "already_compacted"
    entry = lines(path)[-1]
    assert entry["type"] == "compaction" and entry["fromHook"] is True and entry["summary"] == "Summary from the hook."


def test_async_client_refuses_nan_fails_null_id_answers_and_names_a_stopped_daemon(env, tmp_path):
    """The asyncio client as the blocking one: NaN refused before sending, an answer with a
    null id fails the call it belongs to, and a stopped daemon fails the call after its timeout
    naming the socket and the pid."""
    from compactd_client import DaemonNotAnswering, NotJsonError

    sock = str(tmp_path / "run" / "a.sock")
    proc = subprocess.Popen([BIN, "serve", "--socket", sock, "--max-frame", "300"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def scenario():
        deadline = time.time() + 30
        while True:
            try:
                c = await AsyncClient.connect(sock)
                break
            except OSError:
                assert time.time() < deadline, "the daemon did not listen"
                await asyncio.sleep(0.05)
        await c.initialize()
        with pytest.raises(NotJsonError):
            await c.request("shouldCompact", {"contextTokens": float("nan")})
        started = time.time()
        with pytest.raises(CompactdError) as e:
            await c.request("initialize", {"clientName": "x" * 400}, timeout=60)
        assert time.time() - started < 10 and e.value.code == -32600
        assert await c.list_sessions() == []
        proc.send_signal(signal.SIGSTOP)
        while not all(open(f"/proc/{proc.pid}/task/{t}/stat").read().rsplit(")", 1)[1][1] == "T"
                      for t in os.listdir(f"/proc/{proc.pid}/task")):
            await asyncio.sleep(0.01)
        with pytest.raises(DaemonNotAnswering) as stopped:
            await c.list_sessions(timeout=1)
        proc.send_signal(signal.SIGCONT)
        await c.close()
        return stopped.value

    try:
        err = asyncio.run(scenario())
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=30)
    assert isinstance(err, asyncio.TimeoutError)
    assert sock in str(err) and f"pid {proc.pid}" in str(err)


def test_binary_discovery(monkeypatch, tmp_path):
    monkeypatch.delenv("COMPACTD_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BinaryNotFound) as e:
        find_binary()
    assert "COMPACTD_BIN" in str(e.value) and "PATH" in str(e.value)
    with pytest.raises(BinaryNotFound):
        Client.spawn_stdio()
    with pytest.raises(BinaryNotFound):
        asyncio.run(AsyncClient.spawn_stdio())
    os.symlink(BIN, tmp_path / "compactd")
    assert find_binary() == str(tmp_path / "compactd")
    monkeypatch.setenv("COMPACTD_BIN", str(tmp_path / "nope"))
    with pytest.raises(BinaryNotFound) as e:
        find_binary()
    assert "nope" in str(e.value)
    monkeypatch.setenv("COMPACTD_BIN", BIN)
    with Client.spawn_stdio() as c:
        assert c.initialize()["serverName"] == "compactd"


@pytest.mark.parametrize("where", ["compactd_runtime_dir", "xdg_runtime_dir"])
def test_connect_finds_the_default_socket(env, tmp_path, monkeypatch, where):
    """The daemon's rule: $COMPACTD_RUNTIME_DIR, else /run/user/<uid> when it exists, else
    $XDG_RUNTIME_DIR (tests/clients.rs checks /run/user/<uid> itself, in a private mount)."""
    run = tmp_path / "rt"
    run.mkdir(mode=0o700)
    if where == "compactd_runtime_dir":
        # The explicit choice wins over the variable a desktop session sets.
        env["COMPACTD_RUNTIME_DIR"] = str(run)
        monkeypatch.setenv("COMPACTD_RUNTIME_DIR", str(run))
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    else:
        env.pop("COMPACTD_RUNTIME_DIR", None)
        env["XDG_RUNTIME_DIR"] = str(run)
        monkeypatch.delenv("COMPACTD_RUNTIME_DIR", raising=False)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
        standard = f"/run/user/{os.getuid()}"
        if os.path.isdir(standard) and os.stat(standard).st_uid == os.getuid():
            # The user's own runtime directory comes first: named, but no daemon is started
            # in it (it is the user's real one).
            assert default_socket_path() == os.path.join(standard, "compactd", "compactd.sock")
            return
    expected = run / "compactd" / "compactd.sock"
    assert default_socket_path() == str(expected)
    with pytest.raises(DaemonNotRunning) as e:
        Client.connect()
    assert str(expected) in str(e.value) and "compactd serve" in str(e.value)
    proc = subprocess.Popen([BIN, "serve"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not expected.exists():
            assert proc.poll() is None, "daemon exited at start"
            assert time.time() < deadline, "socket did not appear"
            time.sleep(0.02)
        # The socket file appears at bind(), a moment before the daemon listens on it.
        while True:
            try:
                c = Client.connect()
                break
            except DaemonNotRunning:
                assert proc.poll() is None, "daemon exited"
                assert time.time() < deadline, "the daemon did not listen on its socket"
                time.sleep(0.02)
        with c:
            assert c.list_sessions() == []

        async def via_async():
            c = await AsyncClient.connect()
            try:
                return await c.initialize()
            finally:
                await c.close()

        assert asyncio.run(via_async())["serverName"] == "compactd"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def readme_example():
    text = (PKG_DIR / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has a python example"
    return blocks[0]


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """The wheel and the sdist, built from a copy of the package folder as CI builds them
    (`python -m build`), so nothing is written into the checkout."""
    src = tmp_path_factory.mktemp("src") / "python"
    shutil.copytree(PKG_DIR, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info", "dist", "build"))
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(out), str(src)],
                           capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "No module named build" in built.stderr:
        missing("the `build` package is not installed (pip install -r clients/test-requirements.txt)")
    assert built.returncode == 0, f"python -m build failed:\n{built.stdout}\n{built.stderr}"
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return wheels[0], sdists[0]


def new_venv(where, artifact):
    venv = where / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        missing(f"python -m venv failed: {made.stderr.strip()}")
    py = venv / "bin" / "python"
    inst = subprocess.run([str(py), "-m", "pip", "install", "--quiet", str(artifact)], capture_output=True, text=True,
                          timeout=300)
    assert inst.returncode == 0, f"pip install {artifact} failed:\n{inst.stdout}\n{inst.stderr}"
    return py


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory, dists):
    """A new venv with the built wheel installed (what `pip install compactd-client` gives)."""
    return new_venv(tmp_path_factory.mktemp("fresh"), dists[0])


def run_installed(py, args, env, cwd):
    env = dict(env, COMPACTD_BIN=BIN)
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(py), *args], capture_output=True, text=True, env=env, cwd=str(cwd), timeout=120)


def test_fresh_venv_install_runs_the_readme_example(fresh_venv, env, tmp_path):
    where = run_installed(fresh_venv, ["-c", "import compactd_client, sys; print(compactd_client.__file__)"], env, tmp_path)
    assert where.returncode == 0, where.stderr
    assert "site-packages" in where.stdout, f"imported from {where.stdout!r}, not the install"
    script = tmp_path / "first_compaction.py"
    script.write_text(readme_example())
    out = run_installed(fresh_venv, [str(script)], env, tmp_path)
    assert out.returncode == 0, f"README example failed:\n{out.stdout}\n{out.stderr}"
    assert re.search(r"^event: compaction_end \d+ tokens before$", out.stdout, re.M), out.stdout
    assert re.search(r"^## Goal \| kept from entry [0-9a-f]{8}$", out.stdout, re.M), out.stdout


def test_the_wheel_is_typed_and_the_sdist_installs_too(fresh_venv, dists, env, tmp_path):
    probe = (
        "import compactd_client, os, typing\n"
        "from compactd_client import types\n"
        "d = os.path.dirname(compactd_client.__file__)\n"
        "print(os.path.exists(os.path.join(d, 'py.typed')))\n"
        "print(sorted(typing.get_type_hints(types.SessionInfo)))\n"
    )
    out = run_installed(fresh_venv, ["-c", probe], env, tmp_path)
    assert out.returncode == 0, out.stderr
    typed, keys = out.stdout.splitlines()
    assert typed == "True", "py.typed ships in the wheel"
    assert "sessionId" in keys and "isCompacting" in keys
    from_sdist = new_venv(tmp_path / "sdist", dists[1])
    out = run_installed(from_sdist, ["-c", probe], env, tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("True"), out.stderr


def test_example_agent_loop_runs_offline(fresh_venv, env, tmp_path):
    out = run_installed(fresh_venv, [str(REPO / "examples" / "agent_loop.py")], env, tmp_path)
    assert out.returncode == 0, f"agent_loop.py failed:\n{out.stdout}\n{out.stderr}"
    text = out.stdout
    print(text)
    # Pi's three moments, the threshold compaction mid-run and the overflow recovery with a retry.
    assert "checkCompaction(midRun) -> compacted (threshold), willRetry=False" in text
    assert "checkCompaction(postRun) -> compacted (overflow), willRetry=True" in text
    assert "retrying the request on the compacted context" in text
    assert "event compaction_start: reason=threshold" in text and "event compaction_end: reason=overflow" in text
    assert text.rstrip().splitlines()[-1].startswith("done: 2 compaction(s)")
    assert text.rstrip().splitlines()[-2].endswith("Verdict: ship it.")


def test_missing_inputs_fail_in_ci(tmp_path):
    """The suite's own guard: with CI=true a missing binary is a failure, not a skip."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("from conftest import require_binary_and_cases\nrequire_binary_and_cases()\n"
                     "def test_x():\n    pass\n")
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    env = dict(os.environ, COMPACTD_BIN=str(tmp_path / "absent"), CI="true")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(probe)],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.returncode != 0 and "CI=true" in out.stdout, out.stdout
    env["CI"] = ""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(probe)],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert out.returncode in (0, 5) and "1 skipped" in out.stdout, out.stdout
    assert IN_CI == (os.environ.get("CI") == "true")
