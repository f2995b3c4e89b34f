#!/usr/bin/env python3
"""Captures the example exchanges of proto-docs/ by running the real daemon.

Usage: python3 proto-docs/examples/capture.py [path/to/compactd]

Runs `compactd stdio` in a scratch HOME (so no user settings apply), drives one scenario over
NDJSON, answers the daemon's hook requests with `null`, and writes every frame in order to
`proto-docs/examples/transcript.json`. It then re-runs the deterministic requests over LSP
framing and checks that the daemon's `Content-Length` headers and bodies are byte-identical to
what the NDJSON run rendered. Finally it replaces each `<!-- example:NAME -->` ...
`<!-- /example -->` block in proto-docs/*.md with the captured exchange in both framings.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.dirname(HERE)
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("CARGO_TARGET_DIR", os.path.join(DOCS, "..", "target")), "debug", "compactd")


def compact_json(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class Client:
    def __init__(self, home, framing="ndjson", extra=()):
        env = dict(os.environ, HOME=home, XDG_CONFIG_HOME=os.path.join(home, ".config"),
                   RUST_LOG="warn")
        env.pop("PI_CODING_AGENT_DIR", None)
        self.p = subprocess.Popen([BIN, "stdio", *extra], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.framing = framing
        self.next_id = 1
        self.log = []  # (direction, raw text of one frame body)

    def send_raw(self, text):
        data = text.encode()
        if self.framing == "lsp":
            self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        else:
            self.p.stdin.write(data + b"\n")
        self.p.stdin.flush()
        self.log.append(("out", text))

    def read_frame(self):
        if self.framing == "lsp":
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                c = self.p.stdout.read(1)
                if not c:
                    raise EOFError
                header += c
            n = int(re.search(rb"Content-Length: (\d+)\r\n\r\n$", header).group(1))
            assert header == b"Content-Length: %d\r\n\r\n" % n, header
            body = self.p.stdout.read(n)
            assert len(body) == n
            text = body.decode()
        else:
            line = self.p.stdout.readline()
            if not line:
                raise EOFError
            text = line.decode().rstrip("\n")
        self.log.append(("in", text))
        return text

    def call(self, method, params=None, notification=False):
        msg = {"jsonrpc": "2.0"}
        if not notification:
            msg["id"] = self.next_id
            self.next_id += 1
        msg["method"] = method
        if params is not None:
            msg["params"] = params
        start = len(self.log)
        self.send_raw(compact_json(msg))
        if notification:
            time.sleep(0.3)
            return None, self.log[start:]
        return self.until_reply(msg["id"]), self.log[start:]

    def until_reply(self, rid):
        while True:
            v = json.loads(self.read_frame())
            if isinstance(v, list) or ("id" in v and "method" not in v and v.get("id") == rid):
                return v
            if "id" in v and "method" in v:  # a hook request: no result
                self.send_raw(compact_json({"jsonrpc": "2.0", "id": v["id"], "result": None}))

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def scenario(home):
    ex = {}
    c = Client(home)
    work = os.path.join(home, "project")
    sdir = os.path.join(home, "sessions")
    os.makedirs(work)
    model = {"provider": "anthropic", "id": "claude-sonnet-4-5", "contextWindow": 200000,
             "maxTokens": 64000}

    def rec(name, method, params=None, **kw):
        reply, frames = c.call(method, params, **kw)
        ex[name] = frames
        return reply

    rec("initialize", "initialize", {"clientName": "example-editor"})
    info = rec("createSession", "createSession", {"cwd": work, "sessionDir": sdir, "model": model})["result"]
    sid = info["sessionId"]
    t = int(time.time() * 1000) - 600_000
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "Why does the parser reject empty lines?"}], "timestamp": t},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me read the parser."},
         {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "src/parser.rs"}}],
         "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
         "usage": {"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1240,
                   "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
         "stopReason": "toolUse", "timestamp": t + 1000},
        {"role": "toolResult", "toolCallId": "call_1", "toolName": "read",
         "content": [{"type": "text", "text": "fn parse(line: &str) -> Result<Msg> {\n    if line.is_empty() { bail!(\"empty\") }\n    ...\n}"}],
         "isError": False, "timestamp": t + 2000},
        {"role": "assistant", "content": [{"type": "text", "text": "`parse` bails on an empty line; skipping blank lines in the reader fixes it."}],
         "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
         "usage": {"input": 1400, "output": 30, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1430,
                   "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
         "stopReason": "stop", "timestamp": t + 3000},
        {"role": "user", "content": [{"type": "text", "text": "Do it, and run the tests."}], "timestamp": t + 4000},
        {"role": "bashExecution", "command": "cargo test", "output": "test result: ok. 12 passed", "exitCode": 0,
         "cancelled": False, "truncated": False, "timestamp": t + 5000},
        {"role": "assistant", "content": [{"type": "text", "text": "Done: blank lines are skipped and all 12 tests pass."}],
         "api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5",
         "usage": {"input": 1600, "output": 20, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1620,
                   "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
         "stopReason": "stop", "timestamp": t + 6000},
    ]
    ids = []
    for i, m in enumerate(msgs):
        r = rec("appendMessage" if i == 0 else "_append%d" % i, "appendMessage", {"sessionId": sid, "message": m})
        ids.append(r["result"]["entryId"])
    path = rec("listSessions", "listSessions")["result"][0]["path"]
    rec("closeSession", "closeSession", {"sessionId": sid})
    info = rec("openSession", "openSession", {"path": path, "model": model})["result"]
    sid = info["sessionId"]
    rec("syncSession", "syncSession", {"sessionId": sid})
    rec("appendEntry", "appendEntry", {"sessionId": sid, "entry": {"type": "session_info", "name": "Parser: blank lines"}})
    rec("appendEntry_label", "appendEntry", {"sessionId": sid, "entry": {"type": "label", "targetId": ids[0], "label": "start"}})
    rec("setModel", "setModel", {"sessionId": sid, "model": model})
    rec("getBranch", "getBranch", {"sessionId": sid})
    rec("getContext", "getContext", {"sessionId": sid})
    rec("getContext_llm", "getContext", {"sessionId": sid, "format": "llm"})
    rec("getContextUsage", "getContextUsage", {"sessionId": sid})
    rec("getSettings", "getSettings", {"sessionId": sid})
    rec("shouldCompact", "shouldCompact", {"sessionId": sid})
    rec("shouldCompact_numbers", "shouldCompact", {"contextTokens": 190000, "contextWindow": 200000})
    rec("setSettingsOverrides", "setSettingsOverrides", {"sessionId": sid, "compaction": {"keepRecentTokens": 40}})
    rec("previewCompaction", "previewCompaction", {"sessionId": sid})
    rec("previewCompaction_full", "previewCompaction", {"sessionId": sid, "detail": "full"})
    rec("checkCompaction", "checkCompaction", {"sessionId": sid, "phase": "prePrompt"})
    rec("abortCompaction", "abortCompaction", {"sessionId": sid})
    rec("subscribe", "subscribe", {"sessionId": sid})
    rec("registerHooks", "registerHooks", {"sessionId": sid, "hooks": ["session_before_compact", "session_compact", "session_compact_failed", "session_before_tree"], "timeoutMs": 5000})
    rec("compact", "compact", {"sessionId": sid, "customInstructions": "Focus on the parser fix."})
    rec("getCostReport", "getCostReport", {"sessionId": sid})
    rec("getContextUsage_after", "getContextUsage", {"sessionId": sid})
    rec("compact_already", "compact", {"sessionId": sid})
    hits = rec("searchHistory", "searchHistory", {"sessionId": sid, "query": "EMPTY LINE", "limit": 2})["result"]
    rec("getEntry", "getEntry", {"sessionId": sid, "entryId": hits[-1]["entryId"]})
    pinned = rec("pin", "pin", {"sessionId": sid, "text": "Keep the reader's public API unchanged.", "label": "Rules"})["result"]
    rec("_listPins", "listPins", {"sessionId": sid})
    rec("_unpin", "unpin", {"sessionId": sid, "pinId": pinned["pinId"]})
    ex["pin"] = ex["pin"] + ex["_listPins"] + ex["_unpin"]
    rec("navigateTree", "navigateTree", {"sessionId": sid, "targetId": ids[3], "summarize": True, "label": "before tests"})
    rec("unsubscribe", "unsubscribe")
    rec("error_unknown_session", "getBranch", {"sessionId": "s999"})
    rec("error_invalid_params", "openSession", {"path": "relative/session.jsonl"})
    rec("error_method_not_found", "frobnicate", {})
    rec("error_leaf_moved", "appendEntry", {"sessionId": sid, "expectedLeafId": ids[0], "entry": {"type": "custom", "customType": "note"}})
    rec("error_entry_not_found", "appendEntry", {"sessionId": sid, "entry": {"type": "label", "targetId": "deadbeef", "label": "x"}})
    rec("error_not_found", "openSession", {"path": os.path.join(home, "missing.jsonl")})
    bad = os.path.join(home, "notes.jsonl")
    with open(bad, "w") as f:
        f.write("hello\n")
    rec("error_invalid_session_file", "openSession", {"path": bad})
    rec("notification", "abortCompaction", {"sessionId": sid}, notification=True)
    # A batch: two requests and a notification.
    start = len(c.log)
    c.send_raw(compact_json([
        {"jsonrpc": "2.0", "id": "a", "method": "abortCompaction", "params": {"sessionId": sid}},
        {"jsonrpc": "2.0", "method": "unsubscribe"},
        {"jsonrpc": "2.0", "id": "b", "method": "getContextUsage", "params": {"sessionId": sid}},
    ]))
    c.until_reply(None)
    ex["batch"] = c.log[start:]
    start = len(c.log)
    c.send_raw('{"jsonrpc":"2.0","id":7,"method":')
    c.read_frame()
    ex["error_parse"] = c.log[start:]
    c.close()

    # Oversized frame, with a daemon started with a small limit.
    c2 = Client(home, extra=["--max-frame", "64"])
    start = len(c2.log)
    c2.send_raw(compact_json({"jsonrpc": "2.0", "id": 1, "method": "shouldCompact",
                              "params": {"contextTokens": 1, "contextWindow": 2, "settings": {"reserveTokens": 1, "keepRecentTokens": 1}}}))
    c2.read_frame()
    c2.call("initialize", {})
    ex["error_oversized"] = c2.log[start:]
    c2.close()

    # The same frame in LSP framing: the length cannot be trusted, so the connection closes.
    c3 = Client(home, framing="lsp", extra=["--max-frame", "64"])
    start = len(c3.log)
    c3.send_raw(compact_json({"jsonrpc": "2.0", "id": 1, "method": "shouldCompact",
                              "params": {"contextTokens": 1, "contextWindow": 2, "settings": {"reserveTokens": 1, "keepRecentTokens": 1}}}))
    c3.read_frame()
    assert c3.p.wait(timeout=10) == 0, "the connection (and compactd stdio) ends"
    ex["error_oversized_lsp"] = c3.log[start:]
    return ex


def check_lsp(home, ex):
    """Runs deterministic requests over LSP and compares with the NDJSON capture."""
    c = Client(home, framing="lsp")
    for name in ["initialize", "shouldCompact_numbers", "error_method_not_found"]:
        req = ex[name][0][1]
        c.send_raw(req)
        got = c.read_frame()
        want = ex[name][1][1]
        if name == "initialize":
            # The daemon's pid and uptime are another process's: the rest must be identical.
            process = re.compile(r'"pid":\d+,"uptimeMs":\d+')
            got, want = process.sub("", got), process.sub("", want)
        assert got == want, (name, got, want)
    c.close()


def frame_lsp(text):
    return "Content-Length: %d\\r\\n\\r\\n%s" % (len(text.encode()), text)


def render_lsp_only(frames):
    lsp = "\n".join(("--> " if d == "out" else "<-- ") + frame_lsp(t) for d, t in frames)
    return "LSP framing:\n\n```text\n%s\n```\n" % lsp


def render(frames):
    nd = "\n".join(("--> " if d == "out" else "<-- ") + t for d, t in frames)
    lsp = "\n".join(("--> " if d == "out" else "<-- ") + frame_lsp(t) for d, t in frames)
    return ("NDJSON:\n\n```text\n%s\n```\n\nLSP framing (same bytes, with headers):\n\n```text\n%s\n```\n" % (nd, lsp))


def schema_text(s):
    if not isinstance(s, dict):
        return "any JSON"
    if "$ref" in s:
        return "`%s`" % s["$ref"].rsplit("/", 1)[1]
    if "anyOf" in s or "oneOf" in s:
        alts = [schema_text(x) for x in s.get("anyOf", s.get("oneOf"))]
        return " \\| ".join(a for a in alts if a != "`null`") + (" \\| `null`" if "`null`" in alts else "")
    if "const" in s:
        return "`%s`" % json.dumps(s["const"])
    if "enum" in s:
        return " \\| ".join("`%s`" % json.dumps(e) for e in s["enum"])
    t = s.get("type", "any")
    if isinstance(t, list):
        return " \\| ".join("`%s`" % x for x in t)
    if t == "array":
        return "array of %s" % schema_text(s.get("items", {}))
    return "`%s`" % t


def method_table(m):
    """Params / result / errors of one method, from openrpc.json."""
    out = []
    if m["params"]:
        out.append("| param | type | required | notes |\n|---|---|---|---|")
        for p in m["params"]:
            note = p.get("description", "")
            if isinstance(p["schema"], dict) and "default" in p["schema"]:
                note = (note + " Default `%s`." % json.dumps(p["schema"]["default"])).strip()
            out.append("| `%s` | %s | %s | %s |" % (p["name"], schema_text(p["schema"]), "yes" if p["required"] else "no", note))
    else:
        out.append("No params (omit `params`, or send `{}`).")
    out.append("")
    out.append("Result: %s (`%s` in openrpc.json)." % (schema_text(m["result"]["schema"]), m["result"]["name"]))
    out.append("")
    if m["errors"]:
        out.append("Errors: " + ", ".join("%d `%s`" % (e["code"], e["data"]["kind"]) for e in m["errors"]) + ".")
    else:
        out.append("Errors: none beyond the JSON-RPC layer.")
    return "\n".join(out) + "\n"


def main():
    with tempfile.TemporaryDirectory(prefix="compactd-example-") as tmp:
        home = os.path.join("/tmp", "compactd-example")
        if os.path.exists(home):
            subprocess.run(["rm", "-rf", home], check=True)
        os.makedirs(home)
        ex = scenario(home)
        check_lsp(home, ex)
        del tmp
    with open(os.path.join(HERE, "transcript.json"), "w") as f:
        json.dump({k: [{"dir": d, "text": t} for d, t in v] for k, v in ex.items()}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    doc = json.load(open(os.path.join(DOCS, "openrpc.json")))
    methods = {m["name"]: m for m in doc["methods"]}
    mpat = re.compile(r"<!-- method:(\S+) -->.*?<!-- /method -->", re.S)
    pat = re.compile(r"<!-- example:(\S+) -->.*?<!-- /example -->", re.S)
    for md in sorted(os.listdir(DOCS)):
        if not md.endswith(".md"):
            continue
        p = os.path.join(DOCS, md)
        src = open(p).read()
        src2 = mpat.sub(lambda m: "<!-- method:%s -->\n%s<!-- /method -->" % (m.group(1), method_table(methods[m.group(1)])), src)
        out = pat.sub(lambda m: "<!-- example:%s -->\n%s<!-- /example -->" % (m.group(1), (render_lsp_only if m.group(1).endswith("_lsp") else render)(ex[m.group(1)])), src2)
        if out != src:
            open(p, "w").write(out)
    print("captured %d exchanges" % len(ex))


if __name__ == "__main__":
    main()
