"""An MCP host's reduced environment still reaches the user's daemon.

Run by tests/clients.rs inside a private mount namespace in which /run/user/<uid> exists (the
per-user runtime directory of a desktop session) and the fallback socket directory
/tmp/compactd-<uid> is an empty one of its own, so nothing here can meet a daemon outside. Not a pytest module: it is one scenario, run as a script.

1. The user's daemon starts as a desktop session starts it (`compactd start` with
   XDG_RUNTIME_DIR set) and a client holds a session file open in it (so the file is locked).
2. With a misleading XDG_RUNTIME_DIR, the binary, the Python client and the TypeScript client
   all name /run/user/<uid>/compactd/compactd.sock as the default socket.
3. The official MCP SDK's `stdio_client` starts `compactd mcp` with its default environment
   (HOME, PATH, SHELL, TERM, USER, LOGNAME: no XDG_RUNTIME_DIR): its tools answer from the live
   session the daemon holds, and no second daemon was started (nothing in the fallback
   directory).

Prints `ok: …` lines; exits non-zero at the first failure. Environment: COMPACTD_BIN, the
session file to copy (COMPACTD_TEST_SESSION), where to write the daemon's pid for the caller to
stop it (COMPACTD_TEST_PIDFILE).
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from compactd_client import Client, default_socket_path  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, stdio_client  # noqa: E402

BIN = os.environ["COMPACTD_BIN"]
UID = os.getuid()
RUNTIME = f"/run/user/{UID}"
SOCKET = f"{RUNTIME}/compactd/compactd.sock"
CODEWORD = "zanzibar-42"


def check(ok, what):
    if not ok:
        sys.exit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def desktop_env(**extra):
    """What a desktop session gives its programs: XDG_RUNTIME_DIR among the rest."""
    env = {k: os.environ[k] for k in DEFAULT_INHERITED_ENV_VARS if k in os.environ}
    env["XDG_RUNTIME_DIR"] = RUNTIME
    env.update(extra)
    return env


def main():
    check(os.path.isdir(RUNTIME) and not os.environ.get("XDG_RUNTIME_DIR"), f"{RUNTIME} exists, no XDG_RUNTIME_DIR here")

    # 2. The rule, in every client, with a misleading XDG_RUNTIME_DIR.
    elsewhere = desktop_env(XDG_RUNTIME_DIR="/tmp/elsewhere")
    os.environ["XDG_RUNTIME_DIR"] = "/tmp/elsewhere"
    check(default_socket_path() == SOCKET, f"Python's default_socket_path() is {default_socket_path()}")
    del os.environ["XDG_RUNTIME_DIR"]
    node = shutil.which("node")
    check(node is not None, "node is installed (the TypeScript client's check)")
    core = HERE.parent.parent / "typescript" / "src" / "core.js"
    script = f"import({json.dumps(core.as_uri())}).then((m) => console.log(m.defaultSocketPath()))"
    ts = subprocess.run([node, "--input-type=module", "-e", script], env=elsewhere, capture_output=True, text=True)
    check(ts.stdout.strip() == SOCKET, f"TypeScript's defaultSocketPath() is {ts.stdout.strip() or ts.stderr}")

    # 1. The user's daemon, started from the desktop session, holding a session.
    started = subprocess.run([BIN, "start"], env=desktop_env(), capture_output=True, text=True, timeout=60)
    pid = re.search(r"\(pid (\d+)\)", started.stdout)
    if pid:
        # Before any check can fail: the caller stops this daemon however the scenario ends.
        Path(os.environ["COMPACTD_TEST_PIDFILE"]).write_text(pid.group(1))
    try:
        scenario(started)
    finally:
        subprocess.run([BIN, "stop"], env=desktop_env(), capture_output=True, timeout=60)


def scenario(started):
    check(started.returncode == 0 and SOCKET in started.stdout, f"`compactd start` runs the daemon on {started.stdout.strip()}")
    elsewhere = desktop_env(XDG_RUNTIME_DIR="/tmp/elsewhere")
    status = subprocess.run([BIN, "status"], env=elsewhere, capture_output=True, text=True, timeout=60)
    check(status.returncode == 0 and SOCKET in status.stdout, "`compactd status` finds it with another XDG_RUNTIME_DIR")
    project = Path(os.environ["HOME"]) / "project"
    project.mkdir()
    session = project / "session.jsonl"
    shutil.copyfile(os.environ["COMPACTD_TEST_SESSION"], session)
    with Client.connect(SOCKET) as agent:
        sid = agent.open_session(str(session))["sessionId"]
        agent.append_message(sid, {"role": "user", "content": f"Remember the codeword {CODEWORD}."})

        # 3. The MCP SDK's default environment (env=None): the SDK keeps only its list.
        params = StdioServerParameters(command=BIN, args=["mcp", "--session", str(session)])
        check(params.env is None, f"stdio_client passes only {DEFAULT_INHERITED_ENV_VARS}")

        async def recall():
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as mcp:
                    await mcp.initialize()
                    return await mcp.call_tool("search_history", {"query": CODEWORD})

        found = asyncio.run(asyncio.wait_for(recall(), 60))
        text = " ".join(getattr(c, "text", "") for c in found.content)
        check(not found.is_error, f"search_history answered, not an error: {text[:300]}")
        hits = (found.structured_content or {}).get("hits", [])
        check(len(hits) == 1 and CODEWORD in hits[0]["snippet"], "it answered from the session the daemon holds live")
        check(os.listdir(f"/tmp/compactd-{UID}") == [], "no second daemon was started in the fallback directory")
        listed = agent.list_sessions()
        check(len(listed) == 1 and listed[0]["sessionId"] == sid, "the user's daemon holds the one session")


if __name__ == "__main__":
    main()
