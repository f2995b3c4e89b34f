"""`compactd mcp` through the official MCP Python SDK (`mcp` on PyPI) as the client: the two
recall tools with their input and output schemas, bounded and provenance-tagged results on a
session another client holds live (and has compacted), `isError` for an unknown id, the
latest session of a working directory, and start-or-join of the daemon.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest
from conftest import BIN, lines, missing, open_small_keep, require_binary_and_cases, session_copy

require_binary_and_cases()

try:
    from mcp import Client as McpClient
    from mcp import StdioServerParameters
except ImportError as e:  # pragma: no cover - the venv of tests/clients.rs has it
    missing(f"the MCP Python SDK is not installed ({e}); pip install -r clients/test-requirements.txt")


def mcp_server(env, *args):
    return StdioServerParameters(command=BIN, args=["mcp", *args], env=env)


async def _session(params, body):
    async with McpClient(params) as c:
        return await body(c)


def run(params, body):
    return asyncio.run(asyncio.wait_for(_session(params, body), 60))


def entry_text(entry):
    """The texts of a message entry's content, as the tool's text contains them."""
    content = entry["message"]["content"]
    if isinstance(content, str):
        return [content]
    return [b.get("text") or "" for b in content if b.get("type") == "text"]


def test_the_recall_tools_through_the_official_sdk(server, env, tmp_path):
    agent = server()
    path = session_copy(tmp_path, "005-medium-basic")
    sid = open_small_keep(agent, path)["sessionId"]
    result = agent.compact(sid)
    # An entry the summary replaced: before the first kept one, on the branch.
    entries = lines(path)[1:]
    ids = [e["id"] for e in entries]
    compacted = [e for e in entries[: ids.index(result["firstKeptEntryId"])] if e["type"] == "message"]
    target = next(e for e in compacted if e["message"]["role"] == "user")
    # A stretch of its own wording, in another case: the model's recall of what the user said.
    phrase = " ".join(entry_text(target)[0].split()[:6]).upper()
    # Live: appended through the agent's connection a moment ago.
    agent.append_message(sid, {"role": "user", "content": "Remember the codeword zanzibar-42 for later."})
    big = agent.append_message(sid, {"role": "user", "content": "x" * 30000})

    async def body(c):
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert sorted(tools) == ["get_entry", "search_history"]
        s, g = tools["search_history"], tools["get_entry"]
        assert s.input_schema["required"] == ["query"] and "limit" in s.input_schema["properties"]
        assert g.input_schema["required"] == ["entryId"]
        assert set(s.output_schema["properties"]) >= {"hits", "more", "session"}
        assert set(g.output_schema["properties"]) >= {"entryId", "timestamp", "role", "text", "truncated"}

        live = await c.call_tool("search_history", {"query": "ZANZIBAR-42"})
        assert not live.is_error, live.content
        hits = live.structured_content["hits"]
        assert [h["role"] for h in hits] == ["user"] and hits[0]["onBranch"] is True
        assert "zanzibar-42" in hits[0]["snippet"]

        found = await c.call_tool("search_history", {"query": phrase})
        assert not found.is_error, found.content
        by_id = {h["entryId"]: h for h in found.structured_content["hits"]}
        assert target["id"] in by_id, (phrase, list(by_id))
        hit = by_id[target["id"]]
        assert hit["timestamp"] == target["timestamp"] and hit["role"] == "user"
        assert hit["compacted"] is True, "the summary replaced it"
        assert len(hit["snippet"]) <= 200

        bounded = await c.call_tool("search_history", {"query": "e", "limit": 2})
        sc = bounded.structured_content
        assert len(sc["hits"]) == 2 and sc["more"] is True
        capped = await c.call_tool("search_history", {"query": "e", "limit": 5000})
        assert len(capped.structured_content["hits"]) == 50, "at most 50 hits"

        full = await c.call_tool("get_entry", {"entryId": target["id"]})
        assert not full.is_error, full.content
        e = full.structured_content
        assert (e["entryId"], e["timestamp"], e["role"], e["type"]) == (target["id"], target["timestamp"], "user", "message")
        for t in entry_text(target):
            assert t in e["text"]
        assert e["truncated"] is False
        long = (await c.call_tool("get_entry", {"entryId": big["entryId"]})).structured_content
        assert long["truncated"] is True and len(long["text"]) == 20000 and long["totalChars"] == 30000

        unknown = await c.call_tool("get_entry", {"entryId": "no-such-id"})
        assert unknown.is_error is True
        assert "no-such-id" in unknown.content[0].text and "search_history" in unknown.content[0].text
        typo = await c.call_tool("search_history", {"query": "x", "limt": 3})
        assert typo.is_error is True and "unknown field `limt`" in typo.content[0].text

        # As clients send them: a count as a string (the Inspector's CLI), schemas in standard
        # JSON Schema only, and every error text bounded whatever was sent.
        as_text = await c.call_tool("search_history", {"query": "e", "limit": "2"})
        assert not as_text.is_error, as_text.content
        assert len(as_text.structured_content["hits"]) == 2
        for t in tools.values():
            assert '"format"' not in json.dumps([t.input_schema, t.output_schema]), t.name
        huge_id = await c.call_tool("get_entry", {"entryId": "a" * 2_000_000})
        assert huge_id.is_error is True and len(huge_id.content[0].text) < 1000
        huge_query = await c.call_tool("search_history", {"query": "q" * 100_000})
        assert huge_query.is_error is True and len(huge_query.content[0].text) < 1000
        assert "at most 1000 characters" in huge_query.content[0].text
        assert "regex" not in huge_query.content[0].text
        literal = await c.call_tool("search_history", {"query": "(unclosed[ .*"})
        assert not literal.is_error, literal.content

    run(mcp_server(env, "--session", path, "--socket", server.socket), body)
    # The tools held nothing: the agent's hold is the only one, and nothing was written.
    assert [s["sessionId"] for s in agent.list_sessions()] == [sid]


def test_cwd_means_its_latest_pi_session_and_the_daemon_is_started_when_none_runs(env, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    enc = "--" + str(project).lstrip("/").replace("/", "-") + "--"
    sessions = Path(env["PI_CODING_AGENT_DIR"]) / "sessions" / enc
    sessions.mkdir(parents=True)
    old = sessions / "2026-01-01T00-00-00-000Z_old.jsonl"
    shutil.copyfile(session_copy(tmp_path, "005-medium-basic", "a"), old)
    time.sleep(0.05)
    new = sessions / "2026-01-02T00-00-00-000Z_new.jsonl"
    shutil.copyfile(session_copy(tmp_path, "009-bash-executions", "b"), new)
    newest_user = next(e for e in reversed(lines(new)) if e.get("type") == "message" and e["message"]["role"] == "user")
    log = Path(env["XDG_STATE_HOME"]) / "compactd" / "compactd.log"

    async def body(c):
        r = await c.call_tool("search_history", {"query": entry_text(newest_user)[0][:40]})
        assert not r.is_error, r.content
        assert r.structured_content["session"] == str(new)
        assert r.structured_content["hits"][0]["entryId"] == newest_user["id"]

    try:
        run(mcp_server(env, "--cwd", str(project)), body)
        started = re.findall(r"started the daemon pid=(\d+)", log.read_text())
        assert len(started) == 1, "no daemon ran, so `compactd mcp` started one"
        # It outlives the MCP server, for the next client.
        os.kill(int(started[0]), 0)
    finally:
        for pid in re.findall(r"started the daemon pid=(\d+)", log.read_text() if log.exists() else ""):
            try:
                os.kill(int(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
