#!/usr/bin/env python3
"""A minimal coding-agent loop that leaves context management to compactd, runnable offline.

It shows where an agent calls the daemon, in the order Pi 0.85.0 does it:

* ``checkCompaction(prePrompt)`` before appending a new user prompt;
* ``checkCompaction(midRun)`` after a turn's tool results, before the next model request;
* ``checkCompaction(postRun)`` after the run's last message; when the answer says
  ``willRetry`` (an overflow was compacted away) the agent reloads its context with
  ``getContext`` and asks the model again, as Pi's ``agent.continue()`` does.

The "model" is scripted (no network, no key): it answers with tool calls and text, reports
growing token usage so the threshold compaction fires, and once fails with a context-overflow
error so the overflow recovery runs. Every event the daemon sends is printed.

Run: ``python3 examples/agent_loop.py`` (binary: ``$COMPACTD_BIN``, else ``compactd`` on PATH).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List

try:
    from compactd_client import Client
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "clients" / "python"))
    from compactd_client import Client

MODEL = {"provider": "scripted", "id": "fake-coder", "contextWindow": 16000, "maxTokens": 4000}
#: Compact once the context passes 16000 - 4000 tokens; keep the last ~3000 tokens verbatim.
SETTINGS = {"reserveTokens": 4000, "keepRecentTokens": 3000}


def assistant(content: List[Dict[str, Any]], tokens: int, stop: str = "stop", error: str = "") -> Dict[str, Any]:
    """An AgentMessage as the model would produce it (provider/model must be the session's)."""
    msg: Dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "api": "openai-completions",
        "provider": MODEL["provider"],
        "model": MODEL["id"],
        "usage": {"input": max(tokens - 150, 0), "output": min(tokens, 150), "cacheRead": 0, "cacheWrite": 0, "totalTokens": tokens},
        "stopReason": stop,
    }
    if error:
        msg["errorMessage"] = error
    return msg


class ScriptedModel:
    """The fake model: replies from a script, whatever it is asked, and reports the usage a real
    provider would (about one token per four characters of the request, plus its answer)."""

    def __init__(self) -> None:
        self.script: Iterator[str] = iter(
            ["tool"] * 8 + ["All modules reviewed: the handlers are consistent.", "overflow", "Verdict: ship it."]
        )
        self.step = 0

    def reply(self, context: List[Dict[str, Any]]) -> Dict[str, Any]:
        tokens = len(json.dumps(context)) // 4 + 150
        kind = next(self.script)
        if kind == "overflow":  # the provider refuses a request that no longer fits
            return assistant([], 0, "error", f"prompt is too long: {tokens + MODEL['contextWindow']} tokens > {MODEL['contextWindow']} maximum")
        if kind != "tool":
            return assistant([{"type": "text", "text": kind}], tokens)
        self.step += 1
        call = {"type": "toolCall", "id": f"call_{self.step}", "name": "read",
                "arguments": {"path": f"src/module_{self.step}.rs"}}
        return assistant([{"type": "text", "text": f"Reading module {self.step}."}, call], tokens, "toolUse")


def run_tool(call: Dict[str, Any]) -> Dict[str, Any]:
    path = call["arguments"]["path"]
    return {
        "role": "toolResult",
        "toolCallId": call["id"],
        "toolName": call["name"],
        "content": [{"type": "text", "text": f"// {path}\n" + "fn handler() { /* ... */ }\n" * 300}],
        "isError": False,
    }


def report(label: str, outcome: Dict[str, Any]) -> None:
    if outcome["action"] != "none":
        print(f"  checkCompaction({label}) -> {outcome['action']} ({outcome.get('reason')}), willRetry={outcome['willRetry']}")


def run_prompt(c: Client, sid: str, model: ScriptedModel, prompt: str) -> None:
    """One user prompt through to the model's final answer, with Pi's three checks."""
    report("prePrompt", c.check_compaction(sid, "prePrompt"))
    c.append_message(sid, {"role": "user", "content": prompt})
    print(f"user: {prompt}")
    while True:
        # The request the agent would send: the daemon's agent context.
        context = c.get_context(sid)["messages"]
        reply = model.reply(context)
        c.append_message(sid, reply)
        calls = [b for b in reply["content"] if b.get("type") == "toolCall"]
        text = " ".join(b["text"] for b in reply["content"] if b.get("type") == "text")[:60]
        print(f"model ({len(context)} messages in context, {reply['usage']['totalTokens']} tokens): {text or reply.get('errorMessage')}")
        if calls:
            for call in calls:
                c.append_message(sid, run_tool(call))
            report("midRun", c.check_compaction(sid, "midRun"))
            continue
        outcome = c.check_compaction(sid, "postRun")
        report("postRun", outcome)
        if outcome["willRetry"]:
            print("  retrying the request on the compacted context")
            continue
        return


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="compactd-agent-loop-"))
    with Client.spawn_stdio() as c:
        info = c.create_session(cwd=str(work), session_dir=str(work), model=MODEL)
        sid = info["sessionId"]
        c.set_settings_overrides(sid, SETTINGS)
        c.subscribe(sid)
        for name in ("compaction_start", "compaction_end"):
            c.on(name, lambda e, name=name: print(f"  event {name}: reason={e['reason']}"
                                                  + (f", tokensBefore={e['result']['tokensBefore']}" if "result" in e else "")
                                                  + (f", error={e['errorMessage']}" if "errorMessage" in e else "")))
        model = ScriptedModel()
        run_prompt(c, sid, model, "Review modules 1 to 5 and summarize their handlers.")
        run_prompt(c, sid, model, "Now give me the overall verdict.")
        entries = c.get_branch(sid)
        compactions = [e for e in entries if e["type"] == "compaction"]
        print(f"done: {len(compactions)} compaction(s) in {info['path']}")
        return 0 if len(compactions) >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
