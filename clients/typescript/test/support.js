// Shared setup of the end-to-end suites: where the binary and the sessions are, a scratch
// environment per suite, and the rule that a missing input skips on a developer machine but
// fails when CI=true. The binary: $COMPACTD_BIN (tests/clients.rs sets it to the build under
// test), else `compactd` on PATH, else <repo>/target/{debug,release}/compactd.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const pkgDir = path.resolve(here, '..');
export const repoDir = path.resolve(pkgDir, '../..');

function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const p = path.join(dir, name);
    if (dir && fs.existsSync(p)) return p;
  }
  return undefined;
}

function findBinary() {
  if (process.env.COMPACTD_BIN) return fs.existsSync(process.env.COMPACTD_BIN) ? process.env.COMPACTD_BIN : undefined;
  return (
    onPath('compactd') ??
    ['debug', 'release'].map((p) => path.join(repoDir, 'target', p, 'compactd')).find((p) => fs.existsSync(p))
  );
}

export const BIN = findBinary();
export const CASES =
  process.env.COMPACTD_CONFORMANCE_DIR || path.join(repoDir, 'tests/fixtures/conformance/pi-0.85/cases');

const why = !BIN
  ? `compactd binary not found (COMPACTD_BIN=${process.env.COMPACTD_BIN ?? ''}, PATH, target/)`
  : !fs.existsSync(CASES)
    ? `conformance cases not found at ${CASES} (set COMPACTD_CONFORMANCE_DIR)`
    : false;
if (why && process.env.CI === 'true') throw new Error(`${why} (CI=true: this must not be skipped)`);
if (why) console.log(`# SKIPPED: ${why}`);
/** The reason the suites skip, or false. */
export const missing = why;

/** A model with no configured provider/key: the daemon summarizes extractively. */
export const MODEL = { provider: 'compactd-test', id: 'test-model', contextWindow: 64000, maxTokens: 8192 };

/** A scratch dir and a daemon environment confined to it (no user config, no keys). */
export function scratch() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'compactd-client-'));
  const env = { ...process.env };
  for (const k of Object.keys(env)) if (/_API_KEY$/.test(k)) delete env[k];
  env.XDG_CONFIG_HOME = path.join(tmp, 'config');
  env.PI_CODING_AGENT_DIR = path.join(tmp, 'agent');
  env.XDG_RUNTIME_DIR = path.join(tmp, 'run');
  // Above /run/user/<uid> in the socket rule: this test's daemons only, never the user's.
  env.COMPACTD_RUNTIME_DIR = env.XDG_RUNTIME_DIR;
  env.RUST_LOG = env.RUST_LOG || 'warn';
  for (const d of [env.XDG_CONFIG_HOME, env.PI_CODING_AGENT_DIR, env.XDG_RUNTIME_DIR]) {
    fs.mkdirSync(d, { recursive: true, mode: 0o700 });
  }
  return { tmp, env, cleanup: () => fs.rmSync(tmp, { recursive: true, force: true }) };
}

/** Copies a conformance session into `dir` under a fresh name. */
export function sessionCopy(dir, caseName, name = caseName) {
  const dest = path.join(dir, 'sessions', `${name}.jsonl`);
  fs.mkdirSync(path.dirname(dest), { recursive: true });
  fs.copyFileSync(path.join(CASES, caseName, 'session.jsonl'), dest);
  return dest;
}

export function lines(file) {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l));
}
