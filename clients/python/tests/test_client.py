"""End-to-end tests of the blocking client's wire behaviour against a real daemon: framings,
malformed input, events, hooks, two clients on one session. Binary and sessions: see conftest.py.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest
from conftest import BIN, MODEL, lines, open_small_keep, require_binary_and_cases, session_copy

require_binary_and_cases()

from compactd_client import NO_REPLY, Client, RpcError  # noqa: E402

def test_stdio_content_length_open_usage_preview_compact_events(stdio, tmp_path):
    c = stdio()
    path = session_copy(tmp_path, "024-compacted-once")
    before = lines(path)
    info = open_small_keep(c, path)
    sid = info["sessionId"]
    assert info["entryCount"] == len(before) - 1
    assert info["headerId"] == before[0]["id"]
    # Replies come back in the client's framing, header exactly as vim.lsp.rpc writes it.
    assert c.raw_headers and all(re.fullmatch(rb"Content-Length: \d+\r\n\r\n", h) for h in c.raw_headers)

    usage = c.get_context_usage(sid)
    assert usage["contextWindow"] == MODEL["contextWindow"]
    # 024 ends with messages after its compaction, with usage: a number, not null.
    assert isinstance(usage["tokens"], (int, float)) and usage["tokens"] > 0
    assert usage["percent"] == pytest.approx(usage["tokens"] / MODEL["contextWindow"] * 100)

    preview = c.preview_compaction(sid, "full")
    assert "nothingToCompact" not in preview, preview
    assert preview["hasPreviousSummary"] is True
    assert preview["previousSummary"]
    assert preview["summarize"]["count"] > 0 and len(preview["messagesToSummarize"]) == preview["summarize"]["count"]
    assert len(before) == len(lines(path)), "preview writes nothing"

    assert c.subscribe(sid) == {"subscribed": True}
    result = c.compact(sid)
    kinds = [
        (k, m.get("method") or m.get("id"))
        for k, m in c.received
        if k == "notification" or (k == "response" and isinstance(m.get("result"), dict) and "summary" in m["result"])
    ]
    assert [m for _, m in kinds][-3:-1] == ["compaction_start", "compaction_end"], kinds
    assert kinds[-1][0] == "response", "compaction_end arrives before the compact reply"
    start, end = c.notifications("compaction_start")[-1], c.notifications("compaction_end")[-1]
    assert start == {"sessionId": sid, "reason": "manual"}
    assert end["aborted"] is False and end["willRetry"] is False and end["result"] == result
    assert "## Goal" in result["summary"]
    assert result["firstKeptEntryId"] == preview["firstKeptEntryId"]
    assert result["details"]["summarizer"] == "extractive"

    after = lines(path)
    assert len(after) == len(before) + 1 and after[: len(before)] == before
    assert after[-1]["type"] == "compaction" and after[-1]["summary"] == result["summary"]
    # Right after a compaction Pi does not know the context size.
    assert c.get_context_usage(sid)["tokens"] is None
    nothing = c.preview_compaction(sid)
    assert nothing["nothingToCompact"] == "Already compacted" and nothing["reason"] == "already_compacted"
    assert "append at least one message" in nothing["hint"]


def test_socket_ndjson_two_clients_one_session(server, tmp_path):
    agent, watcher = server(), server()
    path = session_copy(tmp_path, "005-medium-basic")
    a = open_small_keep(agent, path)
    w = watcher.open_session(path)
    assert w["sessionId"] == a["sessionId"], "one file, one sessionId"
    sid = a["sessionId"]
    watcher.subscribe(sid)
    assert agent.raw_headers == [], "NDJSON replies carry no headers"

    appended = agent.append_message(sid, {"role": "user", "content": "and one more thing"})
    assert appended["leafId"] == appended["entryId"]
    result = agent.compact(sid)
    assert "## Goal" in result["summary"]

    end = watcher.wait_for(lambda k, m: k == "notification" and m["method"] == "compaction_end", 10)
    starts = watcher.notifications("compaction_start")
    assert starts == [{"sessionId": sid, "reason": "manual"}]
    assert end["params"]["result"] == result and end["params"]["aborted"] is False
    assert agent.notifications("compaction_start") == [], "the compacting client did not subscribe"
    assert [e["type"] for e in lines(path)].count("compaction") == 1
    # The watcher sees the new state of the shared session.
    ctx = watcher.get_context(sid)
    assert ctx["messages"][0]["role"] == "compactionSummary"
    assert ctx["leafId"] == lines(path)[-1]["id"]

    # Closing the agent's hold keeps the session for the watcher.
    agent.close_session(sid)
    assert [s["sessionId"] for s in watcher.list_sessions()] == [sid]


def _error_after(client, count, timeout=30):
    deadline = time.time() + timeout
    while len(client.orphan_errors) <= count:
        assert time.time() < deadline, "no error reply"
        time.sleep(0.01)
    return client.orphan_errors[count]


def test_malformed_and_oversized_frames_keep_the_connection(stdio, tmp_path):
    c = stdio("--max-frame", "1000")
    assert c.initialize()["serverName"] == "compactd"

    # Malformed JSON in a well-formed frame: -32700 with id null.
    c.send_raw(b'Content-Length: 17\r\n\r\n{"jsonrpc": "2.0"')
    err = _error_after(c, 0)
    assert err["id"] is None and err["error"]["code"] == -32700
    assert c.request("listSessions") == []

    # Not a request object: -32600 with its id; unknown method: -32601; wrong types: -32602.
    c.send_message({"jsonrpc": "1.0", "id": 7, "method": "listSessions"})
    err = _error_after(c, 1)
    assert err["id"] == 7 and err["error"]["code"] == -32600
    with pytest.raises(RpcError) as e:
        c.request("noSuchMethod", {})
    assert e.value.code == -32601
    with pytest.raises(RpcError) as e:
        c.request("openSession", {"path": 42})
    assert e.value.code == -32602
    with pytest.raises(RpcError) as e:
        c.get_context_usage("nope")
    assert e.value.code == -32001 and e.value.data == {"kind": "unknown_session"}

    # A batch still works after all that.
    batch_body = json.dumps(
        [{"jsonrpc": "2.0", "id": f"b{i}", "method": "listSessions"} for i in (1, 2)]
    ).encode()
    c.send_raw(b"Content-Length: %d\r\n\r\n" % len(batch_body) + batch_body)
    batch = c.wait_for(lambda k, m: m.get("id") == "b2", 10)
    assert batch["result"] == []

    # The connection is still usable for real work.
    info = c.open_session(session_copy(tmp_path, "005-medium-basic"))
    assert info["entryCount"] > 0
    # Content-Length counts UTF-8 bytes, both ways.
    text = "h\u00e9llo \u2014 \u65e5\u672c\u8a9e \U0001f680"
    c.append_message(info["sessionId"], {"role": "user", "content": text, "timestamp": 1})
    last = c.get_context(info["sessionId"])["messages"][-1]
    assert last == {"role": "user", "content": text, "timestamp": 1}

    # A Content-Length over --max-frame cannot be trusted (the stream is out of step):
    # -32600 with id null naming the limit, then the connection closes.
    big = json.dumps(
        {"jsonrpc": "2.0", "id": 99, "method": "initialize", "params": {"clientName": "x" * 2000}}
    ).encode()
    c.send_raw(b"Content-Length: %d\r\n\r\n" % len(big) + big)
    err = _error_after(c, 2)
    assert err["id"] is None and err["error"]["code"] == -32600
    assert "exceeds" in err["error"]["message"]
    assert c.process.wait(timeout=10) == 0


def test_socket_ndjson_malformed_line_keeps_the_connection(server):
    c = server()
    c.send_raw(b"{not json\n")
    err = _error_after(c, 0)
    assert err["id"] is None and err["error"]["code"] == -32700
    assert c.request("listSessions") == []


def test_hook_that_never_answers_times_out_and_compaction_proceeds(stdio, tmp_path):
    c = stdio()
    path = session_copy(tmp_path, "005-medium-basic")
    info = open_small_keep(c, path)
    sid = info["sessionId"]
    asked = threading.Event()

    def silent(params):
        assert params["sessionId"] == sid and params["reason"] == "manual"
        asked.set()
        return NO_REPLY

    assert c.on_before_compact(silent, session_id=sid, timeout_ms=500) == {"registered": True}
    t0 = time.monotonic()
    result = c.compact(sid, timeout=30)
    elapsed = time.monotonic() - t0
    assert asked.is_set()
    assert elapsed >= 0.45, f"compact returned after {elapsed:.3f}s, before the hook timeout"
    assert "## Goal" in result["summary"]
    entry = lines(path)[-1]
    assert entry["type"] == "compaction" and entry["fromHook"] is False

    # The daemon withdrew its request.
    hook_req = next(m for k, m in c.received if k == "request" and m["method"] == "session_before_compact")
    cancel = c.wait_for(lambda k, m: k == "notification" and m["method"] == "$/cancelRequest", 5)
    assert cancel["params"] == {"id": hook_req["id"]}


def test_socket_writes_accepted_while_compacting_and_abort_from_another_client(server, tmp_path):
    agent, other = server(), server()
    path = session_copy(tmp_path, "005-medium-basic")
    size = os.path.getsize(path)
    sid = open_small_keep(agent, path)["sessionId"]
    assert other.open_session(path)["sessionId"] == sid
    other.subscribe(sid)
    release = threading.Event()
    asked = threading.Event()

    def slow_hook(params):
        asked.set()
        release.wait(10)
        return None

    agent.on_before_compact(slow_hook, session_id=sid, timeout_ms=10000)
    try:
        pending = agent.request_async("compact", {"sessionId": sid})
        assert asked.wait(10), "hook not asked"
        assert [s["isCompacting"] for s in other.list_sessions()] == [True]
        # Appends never wait for a compaction (beyond Pi): accepted at once.
        assert other.append_message(sid, {"role": "user", "content": "meanwhile"})["entryId"]
        size = os.path.getsize(path)
        assert other.abort_compaction(sid) == {"aborted": True, "speculationDiscarded": False}
        with pytest.raises(RpcError) as e:
            pending.result(10)
        assert e.value.code == -32012 and e.value.message == "Compaction cancelled"
    finally:
        release.set()
    end = other.wait_for(lambda k, m: k == "notification" and m["method"] == "compaction_end", 10)["params"]
    assert end["aborted"] is True and "result" not in end
    assert os.path.getsize(path) == size, "an aborted compaction writes nothing"
    assert other.abort_compaction(sid) == {"aborted": False, "speculationDiscarded": False}
    # Writable again.
    assert other.append_message(sid, {"role": "user", "content": "now"})["entryId"]



def test_a_socket_directory_others_may_write_to_is_refused(server, tmp_path, monkeypatch):
    """Before connecting, the socket's directory must be the user's own and closed to others
    (the rule `compactd serve` applies); else `NotYourDaemon`, naming the directory and why,
    and `connect_or_start` starts nothing over it."""
    import asyncio

    from compactd_client import AsyncClient, Client, NotYourDaemon

    server().close()  # the daemon answers on its socket
    sock = server.socket
    run_dir = os.path.dirname(sock)
    os.chmod(run_dir, 0o777)  # another user could now replace the socket
    try:
        want = rf"refusing socket directory {re.escape(run_dir)}: mode 0777 lets other users replace the socket \(not sticky\)"
        with pytest.raises(NotYourDaemon, match=want):
            Client.connect_socket(sock)
        with pytest.raises(NotYourDaemon, match=want):
            asyncio.run(AsyncClient.connect(sock))
        with pytest.raises(NotYourDaemon, match=want):
            Client.connect_or_start(sock, bin=BIN)
    finally:
        os.chmod(run_dir, 0o700)
    # The default socket's directory must be private: mode 0750 is refused before any connect.
    monkeypatch.setenv("COMPACTD_RUNTIME_DIR", str(tmp_path / "xdg"))
    default_dir = tmp_path / "xdg" / "compactd"
    default_dir.mkdir(parents=True, mode=0o700)
    os.chmod(default_dir, 0o750)
    with pytest.raises(NotYourDaemon, match=rf"refusing socket directory {re.escape(str(default_dir))}: mode 0750 lets other users in"):
        Client.connect()


def test_nan_and_infinities_are_refused_before_sending(stdio):
    """Python's json writes ``NaN``, which is not JSON: the daemon could only answer a parse
    error with a null id, which the client dropped, and the call waited out its timeout (120 s).
    Now the value is refused before anything is sent, with a typed error naming where it is."""
    from compactd_client import NotJsonError

    c = stdio(framing="ndjson")
    started = time.time()
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(NotJsonError) as e:
            c.should_compact(context_tokens=bad, context_window=200000)
        assert "params.contextTokens" in str(e.value)
    with pytest.raises(NotJsonError):
        c.notify("shouldCompact", {"contextTokens": [1, float("nan")]})
    assert time.time() - started < 5
    assert c.orphan_errors == [], "nothing reached the daemon"
    assert c.should_compact(context_tokens=1, context_window=200000)["shouldCompact"] is False


def test_an_answer_with_a_null_id_fails_the_call_it_belongs_to(stdio):
    """A request the daemon cannot read an id from (here: over --max-frame) is answered with
    `id: null` and the frame's size; the call it belongs to fails at once instead of waiting
    out its timeout, and a waiting call of another size is left alone."""
    c = stdio("--max-frame", "300", framing="ndjson")
    c.initialize()
    started = time.time()
    with pytest.raises(RpcError) as e:
        c.request("initialize", {"clientName": "x" * 400}, timeout=60)
    assert time.time() - started < 10, "failed at once, not after the timeout"
    assert e.value.code == -32600 and "exceeds" in e.value.message
    assert isinstance(e.value.data.get("frameBytes"), int)
    # A malformed raw frame (no call waits for it) is an orphan and fails nothing.
    c.send_raw(b"{not json\n")
    assert c.request("listSessions") == []
    assert c.orphan_errors and c.orphan_errors[-1]["id"] is None


def _stopped(proc):
    """SIGSTOPs `proc` and waits until every thread has stopped."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.time() + 10
    while time.time() < deadline:
        states = []
        for t in os.listdir(f"/proc/{proc.pid}/task"):
            with open(f"/proc/{proc.pid}/task/{t}/stat") as f:
                stat = f.read()
            states.append(stat[stat.rfind(")") + 2])
        if all(s == "T" for s in states):
            return
        time.sleep(0.01)
    raise AssertionError("the daemon did not stop")


def test_a_stopped_daemon_fails_the_call_naming_socket_and_pid(env, tmp_path):
    """A daemon stopped with SIGSTOP still accepts connections (the kernel queues them) and
    never answers: the call gives up after its timeout with `DaemonNotAnswering`, a
    `TimeoutError` naming the socket and the daemon's pid."""
    from compactd_client import DaemonNotAnswering

    sock = str(tmp_path / "run" / "stopped.sock")
    proc = subprocess.Popen([BIN, "serve", "--socket", sock], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                c = Client.connect_socket(sock)
                break
            except OSError:
                assert time.time() < deadline, "the daemon did not listen"
                time.sleep(0.05)
        assert c.initialize()["serverName"] == "compactd"
        _stopped(proc)
        started = time.time()
        with pytest.raises(DaemonNotAnswering) as e:
            c.list_sessions(timeout=2)
        assert 1.5 < time.time() - started < 10
        assert isinstance(e.value, TimeoutError)
        assert sock in str(e.value) and f"pid {proc.pid}" in str(e.value), str(e.value)
        assert e.value.pid == proc.pid and e.value.socket == sock
        # A fresh connection to the stopped daemon gives up the same way.
        late = Client.connect_socket(sock)
        with pytest.raises(DaemonNotAnswering):
            late.initialize(timeout=1)
        proc.send_signal(signal.SIGCONT)
        assert c.list_sessions() == [], "the connection works again once resumed"
        late.close()
        c.close()
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=30)
