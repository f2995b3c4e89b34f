"""Shared setup of the client suite: where the binary and the sessions are, and the rule that a
missing input skips on a developer machine but fails when ``CI=true``.

The binary comes from ``$COMPACTD_BIN`` (tests/clients.rs sets it to the build under test), else
``compactd`` on ``PATH``, else ``<repo>/target/{debug,release}/compactd``. The sessions come from
``$COMPACTD_CONFORMANCE_DIR``, else the copy the repository carries,
``<repo>/tests/fixtures/conformance/pi-0.85/cases``.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PKG_DIR = HERE.parent
REPO = PKG_DIR.parent.parent
sys.path.insert(0, str(PKG_DIR))
IN_CI = os.environ.get("CI") == "true"


def _binary():
    env = os.environ.get("COMPACTD_BIN")
    if env:
        return env if os.path.isfile(env) else None
    found = shutil.which("compactd")
    if found:
        return found
    for profile in ("debug", "release"):
        p = REPO / "target" / profile / "compactd"
        if p.is_file():
            return str(p)
    return None


BIN = _binary()
CASES = Path(
    os.environ.get("COMPACTD_CONFORMANCE_DIR") or REPO / "tests" / "fixtures" / "conformance" / "pi-0.85" / "cases"
)


def missing(what):
    """Skips the calling module (a developer machine) or fails it (CI=true)."""
    if IN_CI:
        pytest.fail(f"{what} (CI=true: this must not be skipped)", pytrace=False)
    pytest.skip(what, allow_module_level=True)


def require_binary_and_cases():
    if BIN is None:
        missing(f"compactd binary not found (COMPACTD_BIN={os.environ.get('COMPACTD_BIN')!r}, PATH, target/)")
    if not CASES.is_dir():
        missing(f"conformance cases not found at {CASES} (set COMPACTD_CONFORMANCE_DIR)")


#: No provider/key is configured for it, so the daemon summarizes extractively.
MODEL = {"provider": "compactd-test", "id": "test-model", "contextWindow": 64000, "maxTokens": 8192}


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    for name in ("config", "agent", "run", "state"):
        (tmp_path / name).mkdir(mode=0o700)
    e["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    e["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
    e["XDG_RUNTIME_DIR"] = str(tmp_path / "run")
    # Above /run/user/<uid> in the socket rule: this test's daemons only, never the user's.
    e["COMPACTD_RUNTIME_DIR"] = str(tmp_path / "run")
    # `compactd stdio` / `connect` log here (the daemon's log file), not under the real home.
    e["XDG_STATE_HOME"] = str(tmp_path / "state")
    e.setdefault("RUST_LOG", "warn")
    return e


def session_copy(tmp_path, case, name=None):
    dest = tmp_path / f"{name or case}.jsonl"
    shutil.copyfile(CASES / case / "session.jsonl", dest)
    return str(dest)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def open_small_keep(client, path):
    info = client.open_session(path, model=MODEL)
    assert client.set_settings_overrides(info["sessionId"], {"keepRecentTokens": 2000}) == {"ok": True}
    return info


@pytest.fixture
def stdio(env):
    clients = []

    def make(*args, framing="lsp"):
        from compactd_client import Client

        c = Client.spawn_stdio(BIN, list(args), env=env, framing=framing)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()
        assert c.process.returncode == 0, "daemon exits cleanly when stdin closes"


@pytest.fixture
def server(env, tmp_path):
    sock = str(tmp_path / "run" / "compactd.sock")
    proc = subprocess.Popen(
        [BIN, "serve", "--socket", sock], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while not os.path.exists(sock):
        assert proc.poll() is None, "daemon exited at start"
        assert time.time() < deadline, "socket did not appear"
        time.sleep(0.02)
    clients = []

    def connect(framing="ndjson"):
        from compactd_client import Client
        from compactd_client._wire import DaemonNotRunning

        # The socket file appears at bind(), a moment before the daemon listens on it.
        deadline = time.time() + 10
        while True:
            try:
                c = Client.connect_socket(sock, framing)
                break
            except DaemonNotRunning:
                assert proc.poll() is None, "daemon exited"
                assert time.time() < deadline, "the daemon did not listen on its socket"
                time.sleep(0.02)
        clients.append(c)
        return c

    connect.socket = sock
    yield connect
    for c in clients:
        c.close()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert not os.path.exists(sock), "socket removed on clean shutdown"
