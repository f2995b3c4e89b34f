// The package's public API against a real daemon: every protocol method is a typed method,
// clear rejections (no crash) for a missing binary or socket, the default socket, `write: false`,
// the event iterator, `CompactdError.kind`, and installs from a fresh npm prefix running the
// README example. Binary and sessions: see support.js.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import {
  CompactdClient,
  CompactdConnectError,
  CompactdError,
  NotYourDaemonError,
  defaultSocketPath,
  isRpcError,
} from '../src/index.js';
import { BIN, MODEL, lines, missing, pkgDir, repoDir, scratch, sessionCopy } from './support.js';

const run = promisify(execFile);

async function waitForFile(file, daemon) {
  const deadline = Date.now() + 60000;
  while (!fs.existsSync(file)) {
    if (Date.now() > deadline || daemon.exitCode !== null) throw new Error('daemon did not start');
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function stop(daemon) {
  if (daemon.exitCode !== null) return;
  const exited = new Promise((r) => daemon.once('exit', r));
  daemon.kill('SIGTERM');
  await exited;
}

describe('compactd-client API', { skip: missing }, () => {
  let s;
  before(() => {
    s = scratch();
  });
  after(() => s?.cleanup());

  test('an answer with a null id fails only the waiting calls whose request had its size', async () => {
    // A stand-in daemon: it answers the second request's frame as unreadable (id null, its
    // size in data.frameBytes), then the first one normally.
    const sock = path.join(s.env.XDG_RUNTIME_DIR, 'fake.sock');
    const frames = [];
    const server = net.createServer((conn) => {
      let buf = Buffer.alloc(0);
      conn.on('data', (chunk) => {
        buf = Buffer.concat([buf, chunk]);
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const length = Number(/content-length:\s*(\d+)/i.exec(buf.subarray(0, end).toString())[1]);
          if (buf.length < end + 4 + length) return;
          frames.push({ length, id: JSON.parse(buf.subarray(end + 4, end + 4 + length)).id });
          buf = buf.subarray(end + 4 + length);
          if (frames.length === 2) {
            const send = (m) => {
              const body = Buffer.from(JSON.stringify(m));
              conn.write(`Content-Length: ${body.length}\r\n\r\n`);
              conn.write(body);
            };
            send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error', data: { kind: 'parse_error', frameBytes: frames[1].length } } });
            setTimeout(() => send({ jsonrpc: '2.0', id: frames[0].id, result: 'first' }), 50);
          }
        }
      });
    });
    await new Promise((r) => server.listen(sock, r));
    const client = await CompactdClient.connectSocket(sock, s.env);
    try {
      const first = client.request('listSessions', {});
      const second = client.request('listSessions', { padding: 'x'.repeat(100) });
      await assert.rejects(second, (e) => isRpcError(e, -32700) && e.data.frameBytes === frames[1].length);
      assert.equal(await first, 'first', 'the call of another size still gets its answer');
    } finally {
      await client.close();
      server.close();
    }
  });

  test('every protocol method of openrpc.json is a client method', () => {
    const doc = JSON.parse(fs.readFileSync(path.join(repoDir, 'proto-docs/openrpc.json'), 'utf8'));
    const names = doc.methods.map((m) => m.name);
    assert.ok(names.length >= 22);
    const absent = names.filter((n) => typeof CompactdClient.prototype[n] !== 'function');
    assert.deepEqual(absent, []);
    const dts = fs.readFileSync(path.join(pkgDir, 'src/index.d.ts'), 'utf8');
    const untyped = names.filter((n) => !new RegExp(`^  ${n}\\(`, 'm').test(dts));
    assert.deepEqual(untyped, [], 'declared in index.d.ts');
  });

  test('a missing binary rejects with a clear error instead of crashing', async () => {
    const env = { ...s.env, PATH: s.tmp };
    delete env.COMPACTD_BIN;
    await assert.rejects(CompactdClient.spawnStdio({ env }), (e) => {
      assert.ok(e instanceof CompactdConnectError);
      assert.equal(e.code, 'ENOENT');
      assert.match(e.message, /compactd binary not found: compactd \(set COMPACTD_BIN .* PATH\)/);
      return true;
    });
    await assert.rejects(CompactdClient.spawnStdio({ bin: path.join(s.tmp, 'nope') }), /binary not found: .*nope/);
    // COMPACTD_BIN is honoured when no `bin` is given.
    const c = await CompactdClient.spawnStdio({ env: { ...s.env, COMPACTD_BIN: BIN }, stderr: 'ignore' });
    assert.equal((await c.initialize()).serverName, 'compactd');
    await c.close();
  });

  test('connect() finds the default socket, and rejects clearly when nothing listens', async () => {
    // The daemon's rule: $COMPACTD_RUNTIME_DIR, else /run/user/<uid> when it exists, else
    // $XDG_RUNTIME_DIR, else /tmp/compactd-<uid> (tests/clients.rs checks /run/user/<uid> in a
    // private mount).
    const env = { ...s.env, COMPACTD_RUNTIME_DIR: path.join(s.tmp, 'rt') };
    fs.mkdirSync(env.COMPACTD_RUNTIME_DIR, { mode: 0o700 });
    const sock = defaultSocketPath(env);
    assert.equal(sock, path.join(env.COMPACTD_RUNTIME_DIR, 'compactd', 'compactd.sock'));
    const uid = process.getuid();
    const standard = `/run/user/${uid}`;
    const hasStandard = fs.existsSync(standard) && fs.statSync(standard).uid === uid;
    assert.equal(
      defaultSocketPath({ XDG_RUNTIME_DIR: '/x', TMPDIR: '/y' }),
      hasStandard ? `${standard}/compactd/compactd.sock` : '/x/compactd/compactd.sock',
    );
    assert.equal(
      defaultSocketPath({ TMPDIR: '/y' }),
      hasStandard ? `${standard}/compactd/compactd.sock` : `/tmp/compactd-${uid}/compactd.sock`,
    );
    await assert.rejects(CompactdClient.connectSocket(sock), (e) => {
      assert.ok(e instanceof CompactdConnectError);
      assert.match(e.message, /no compactd daemon listening on .*compactd\.sock .*compactd serve/);
      return true;
    });
    const daemon = spawn(BIN, ['serve'], { env, stdio: 'ignore' });
    try {
      await waitForFile(sock, daemon);
      const saved = process.env.COMPACTD_RUNTIME_DIR;
      process.env.COMPACTD_RUNTIME_DIR = env.COMPACTD_RUNTIME_DIR;
      let c;
      try {
        c = await CompactdClient.connect();
      } finally {
        if (saved === undefined) delete process.env.COMPACTD_RUNTIME_DIR;
        else process.env.COMPACTD_RUNTIME_DIR = saved;
      }
      assert.deepEqual(await c.listSessions(), []);
      await c.close();
    } finally {
      await stop(daemon);
    }
  });

  test('connectOrStart starts one daemon, then joins it; it outlives its clients', async () => {
    const env = { ...s.env, COMPACTD_RUNTIME_DIR: path.join(s.tmp, 'rt2') };
    fs.mkdirSync(env.COMPACTD_RUNTIME_DIR, { mode: 0o700 });
    const socketPath = defaultSocketPath(env);
    const pids = () =>
      fs
        .readdirSync('/proc')
        .filter((p) => /^\d+$/.test(p))
        .filter((p) => {
          try {
            const args = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
            return args.includes('serve') && args.includes(socketPath);
          } catch {
            return false;
          }
        });
    try {
      const [a, b] = await Promise.all([
        CompactdClient.connectOrStart({ env, bin: BIN }),
        CompactdClient.connectOrStart({ env, bin: BIN }),
      ]);
      const file = sessionCopy(s.tmp, '005-medium-basic', 'shared');
      const { sessionId } = await a.openSession({ path: file });
      assert.deepEqual((await b.listSessions()).map((x) => x.sessionId), [sessionId], 'one daemon');
      await a.close();
      await b.close();
      assert.equal(pids().length, 1, 'exactly one daemon, still running');
      const c = await CompactdClient.connectOrStart({ env, bin: BIN });
      assert.equal((await c.initialize()).serverName, 'compactd');
      await c.close();
      assert.equal(pids().length, 1);
      await assert.rejects(
        CompactdClient.connectOrStart({ env, bin: path.join(s.tmp, 'nope'), socketPath: path.join(s.tmp, 'none.sock') }),
        (e) => e instanceof CompactdConnectError && /binary not found/.test(e.message),
      );
    } finally {
      for (const p of pids()) process.kill(Number(p), 'SIGTERM');
    }
  });

  test('a socket directory others may write to is refused before connecting; nothing is started', async () => {
    const dir = path.join(s.tmp, 'open-dir');
    const socketPath = path.join(dir, 'compactd.sock');
    const daemon = spawn(BIN, ['serve', '--socket', socketPath], { env: s.env, stdio: 'ignore' });
    try {
      await waitForFile(socketPath, daemon);
      const c = await CompactdClient.connectSocket(socketPath);
      await c.close();
      fs.chmodSync(dir, 0o777);
      const refused = (e) => {
        assert.ok(e instanceof NotYourDaemonError && e instanceof CompactdConnectError, String(e));
        assert.equal(e.code, 'EPERM');
        assert.equal(e.message, `refusing socket directory ${dir}: mode 0777 lets other users replace the socket (not sticky)`);
        return true;
      };
      await assert.rejects(CompactdClient.connectSocket(socketPath), refused);
      await assert.rejects(CompactdClient.connectOrStart({ socketPath, bin: BIN, env: s.env }), refused);
    } finally {
      fs.chmodSync(dir, 0o700);
      await stop(daemon);
    }
    // The default socket's directory must be private (mode 0700).
    const env = { ...s.env, COMPACTD_RUNTIME_DIR: path.join(s.tmp, 'xdg') };
    const defaultDir = path.join(env.COMPACTD_RUNTIME_DIR, 'compactd');
    fs.mkdirSync(defaultDir, { recursive: true, mode: 0o700 });
    fs.chmodSync(defaultDir, 0o750);
    await assert.rejects(CompactdClient.connectOrStart({ env, bin: BIN }), (e) => {
      assert.ok(e instanceof NotYourDaemonError, String(e));
      assert.equal(e.message, `refusing socket directory ${defaultDir}: mode 0750 lets other users in (expected 0700; fix it with chmod 700 or remove it)`);
      return true;
    });
    assert.ok(!fs.existsSync(path.join(defaultDir, 'compactd.sock')), 'no daemon was started there');
  });

  test("the daemon's stderr goes to the log option; log lines come on request at their level", async () => {
    const lines = [];
    const bad = await CompactdClient.spawnStdio({ bin: BIN, env: s.env, args: ['--max-frame', 'lots'], log: (l) => lines.push(l) });
    assert.equal(await bad.exited, 2);
    assert.ok(lines.some((l) => l.includes("invalid value 'lots'")), JSON.stringify(lines));
    const quiet = [];
    const c = await CompactdClient.spawnStdio({ bin: BIN, env: s.env, log: (l) => quiet.push(l) });
    const logged = [];
    await c.forwardDaemonLog((level, message) => logged.push([level, message]));
    const file = sessionCopy(s.tmp, '005-medium-basic', 'logged');
    await c.openSession({ path: file });
    const deadline = Date.now() + 10000;
    while (!logged.some(([, m]) => m.includes('session opened')) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    await c.close();
    assert.ok(logged.some(([level, m]) => level === 'info' && m.includes('session opened') && m.includes(file)), JSON.stringify(logged));
    assert.deepEqual(quiet, [], 'nothing on stderr: the daemon logs INFO to its file');
  });

  test('compact with write: false returns the compaction and appends nothing; events iterate', async () => {
    const c = await CompactdClient.spawnStdio({ bin: BIN, env: s.env, stderr: 'ignore' });
    try {
      const file = sessionCopy(s.tmp, '005-medium-basic', 'dry');
      const before = fs.readFileSync(file);
      const { sessionId } = await c.openSession({ path: file, model: MODEL });
      await c.setSettingsOverrides(sessionId, { compaction: { keepRecentTokens: 2000 } });
      const events = c.events({ sessionId });
      await c.subscribe(sessionId);
      const dry = await c.compact(sessionId, { write: false });
      assert.deepEqual(fs.readFileSync(file), before, 'nothing appended');
      assert.match(dry.summary, /## Goal/);
      const seen = [];
      for await (const ev of events) {
        seen.push(ev.name);
        if (ev.name === 'compaction_end') {
          assert.deepEqual(ev.params.result, dry);
          break;
        }
      }
      assert.deepEqual(seen, ['compaction_start', 'compaction_end']);
      const real = await c.compact(sessionId);
      assert.equal(real.summary, dry.summary);
      assert.equal(real.firstKeptEntryId, dry.firstKeptEntryId);
      assert.equal(lines(file).at(-1).type, 'compaction');
      await assert.rejects(c.compact(sessionId), (e) => {
        assert.ok(e instanceof CompactdError && isRpcError(e, -32011));
        assert.equal(e.kind, 'already_compacted');
        assert.equal(e.message, 'Already compacted');
        return true;
      });
    } finally {
      await c.close();
    }
  });
});

/** The README's first `js` block. */
function readmeExample() {
  const text = fs.readFileSync(path.join(pkgDir, 'README.md'), 'utf8');
  const m = text.match(/```js\n([\s\S]*?)```/);
  assert.ok(m, 'the README has a js example');
  return m[1];
}

/** A copy of the package as a fresh checkout has it (no node_modules). */
function freshPackageCopy(root) {
  const dest = path.join(root, 'compactd', 'clients', 'typescript');
  fs.mkdirSync(dest, { recursive: true });
  for (const f of ['package.json', 'README.md']) {
    fs.copyFileSync(path.join(pkgDir, f), path.join(dest, f));
  }
  fs.cpSync(path.join(pkgDir, 'src'), path.join(dest, 'src'), { recursive: true });
  return dest;
}

/** A TypeScript use of the package, checked in the fresh project. */
const USE_TS = `import { CompactdClient, CompactdError, isRpcError, type CompactionResult, type SessionInfo } from 'compactd-client';

const c = await CompactdClient.connectOrStart({ socketPath: '/tmp/x.sock' });
const info: SessionInfo = await c.openSession({ path: '/abs/s.jsonl' });
try {
  const r: CompactionResult = await c.compact(info.sessionId, { customInstructions: 'focus' });
  console.log(r.summary.length, r.tokensBefore);
} catch (e) {
  if (e instanceof CompactdError) console.log(e.kind, e.code);
  if (isRpcError(e, -32010)) console.log(e.data);
}
const off = await c.forwardDaemonLog((level, message) => console.log(level, message));
off();
await c.close();
`;

/** A consumer checked by a bare `tsc --strict FILE` (no tsconfig, no target or lib option: ES5
 * defaults), with an async function and a `for await` over the event iterator. */
const STRICT_TS = `import { CompactdClient, CompactdError, type CompactionResult, type EventParams } from 'compactd-client';

async function main(): Promise<void> {
  const c = await CompactdClient.connectOrStart();
  const { sessionId } = await c.openSession({ path: '/abs/s.jsonl' });
  const r: CompactionResult = await c.compact(sessionId, { customInstructions: 'focus' });
  console.log(r.summary.length);
  c.on('compaction_end', (e: EventParams['compaction_end']) => console.log(e.aborted, e.result?.summary));
  for await (const ev of c.events({ sessionId })) {
    if (ev.name === 'compaction_end') break;
  }
  try {
    await c.pin(sessionId, 'keep', { label: 'l' });
  } catch (e) {
    if (e instanceof CompactdError) console.log(e.kind);
  }
  await c.close();
}
main();
`;

describe('installs from a packed tarball into a fresh project', { skip: missing }, () => {
  let s;
  before(() => {
    s = scratch();
  });
  after(() => s?.cleanup());

  const npm = (args, cwd) => run('npm', [...args, '--no-audit', '--no-fund'], { cwd, env: s.env, timeout: 240000 });

  test('npm pack, install the tarball, then another package; the README example runs and the types check', async () => {
    const pkg = freshPackageCopy(path.join(s.tmp, 'src'));
    const { stdout: packed } = await npm(['pack', '--pack-destination', s.tmp, '--json'], pkg);
    const tarball = path.join(s.tmp, JSON.parse(packed)[0].filename);
    assert.deepEqual(JSON.parse(packed)[0].bundled ?? [], []);
    const app = path.join(s.tmp, 'app');
    fs.mkdirSync(app);
    await npm(['init', '-y'], app);
    await npm(['install', tarball], app);
    assert.ok(!fs.lstatSync(path.join(app, 'node_modules/compactd-client')).isSymbolicLink(), 'a real copy');
    // A later, unrelated install must leave the client working (nothing of it to prune).
    const tsc = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).devDependencies.typescript;
    await npm(['install', `typescript@${tsc}`], app);
    assert.deepEqual(
      fs.readdirSync(path.join(app, 'node_modules')).filter((d) => !d.startsWith('.')).sort(),
      ['compactd-client', 'typescript'],
      'the client brought no dependency of its own',
    );
    // The tarball's `types` is the d.ts generated from openrpc.json.
    const installed = path.join(app, 'node_modules/compactd-client');
    const types = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8')).types;
    assert.match(fs.readFileSync(path.join(installed, types), 'utf8'), /^\/\/ Generated by `python3 clients\/generate\.py`/);
    // A bare `tsc --strict FILE`, with no tsconfig yet: the package's types check as they are.
    const tscBin = path.join(app, 'node_modules/.bin/tsc');
    fs.writeFileSync(path.join(app, 'strict.ts'), STRICT_TS);
    await run(tscBin, ['--strict', 'strict.ts'], { cwd: app, env: s.env });
    fs.writeFileSync(path.join(app, 'strict.ts'), STRICT_TS.replace("{ label: 'l' }", "{ label: 1 }"));
    await assert.rejects(run(tscBin, ['--strict', 'strict.ts'], { cwd: app, env: s.env }), (e) => /strict\.ts.*error TS2322/.test(e.stdout));
    fs.rmSync(path.join(app, 'strict.ts'));
    fs.rmSync(path.join(app, 'strict.js'));
    fs.writeFileSync(path.join(app, 'first-compaction.mjs'), readmeExample());
    const { stdout } = await run(process.execPath, ['first-compaction.mjs'], {
      cwd: app,
      env: { ...s.env, COMPACTD_BIN: BIN },
      timeout: 60000,
    });
    assert.match(stdout, /^event: compaction_end \d+ tokens before$/m);
    assert.match(stdout, /^## Goal \| kept from entry [0-9a-f]{8}$/m);
    // `tsc --init` defaults, no @types/node: the use type-checks, and so does index.d.ts itself.
    await run(tscBin, ['--init'], { cwd: app, env: s.env });
    fs.writeFileSync(path.join(app, 'use.mts'), USE_TS);
    await run(tscBin, ['--noEmit'], { cwd: app, env: s.env });
    await run(tscBin, ['--noEmit', '--skipLibCheck', 'false'], { cwd: app, env: s.env });
    // The check can fail: a wrong use is refused.
    fs.writeFileSync(path.join(app, 'use.mts'), USE_TS.replace("c.openSession({ path: '/abs/s.jsonl' })", 'c.openSession({ file: 1 })'));
    await assert.rejects(run(tscBin, ['--noEmit'], { cwd: app, env: s.env }), (e) => /error TS/.test(e.stdout));
  });
});
