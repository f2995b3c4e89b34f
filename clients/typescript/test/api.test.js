// The package's public API against a real daemon: every protocol method is a typed method,
// clear rejections (no crash) for a missing binary or socket, the default socket, `write: false`,
// the event iterator, `CompactdError.kind`, and installs from a fresh npm prefix running the
// README example. Binary and sessions: see support.js.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';

import {
  CompactdClient,
  CompactdConnectError,
  CompactdError,
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
    const env = { ...s.env, XDG_RUNTIME_DIR: path.join(s.tmp, 'rt') };
    fs.mkdirSync(env.XDG_RUNTIME_DIR, { mode: 0o700 });
    const sock = defaultSocketPath(env);
    assert.equal(sock, path.join(env.XDG_RUNTIME_DIR, 'compactd', 'compactd.sock'));
    const noXdg = { TMPDIR: '/x' };
    assert.equal(defaultSocketPath(noXdg), `/x/compactd-${process.getuid()}/compactd.sock`);
    await assert.rejects(CompactdClient.connectSocket(sock), (e) => {
      assert.ok(e instanceof CompactdConnectError);
      assert.match(e.message, /no compactd daemon listening on .*compactd\.sock .*compactd serve/);
      return true;
    });
    const daemon = spawn(BIN, ['serve'], { env, stdio: 'ignore' });
    try {
      await waitForFile(sock, daemon);
      const saved = process.env.XDG_RUNTIME_DIR;
      process.env.XDG_RUNTIME_DIR = env.XDG_RUNTIME_DIR;
      let c;
      try {
        c = await CompactdClient.connect();
      } finally {
        if (saved === undefined) delete process.env.XDG_RUNTIME_DIR;
        else process.env.XDG_RUNTIME_DIR = saved;
      }
      assert.deepEqual(await c.listSessions(), []);
      await c.close();
    } finally {
      await stop(daemon);
    }
  });

  test('compact with write: false returns the compaction and appends nothing; events iterate', async () => {
    const c = await CompactdClient.spawnStdio({ bin: BIN, env: s.env, stderr: 'ignore' });
    try {
      const file = sessionCopy(s.tmp, '005-medium-basic', 'dry');
      const before = fs.readFileSync(file);
      const { sessionId } = await c.openSession({ path: file, model: MODEL });
      await c.setSettingsOverrides({ sessionId, compaction: { keepRecentTokens: 2000 } });
      const events = c.events({ sessionId });
      await c.subscribe({ sessionId });
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
  for (const f of ['package.json', 'package-lock.json', 'README.md']) {
    fs.copyFileSync(path.join(pkgDir, f), path.join(dest, f));
  }
  fs.cpSync(path.join(pkgDir, 'src'), path.join(dest, 'src'), { recursive: true });
  return dest;
}

describe('installs from a fresh npm prefix', { skip: missing }, () => {
  let s;
  before(() => {
    s = scratch();
  });
  after(() => s?.cleanup());

  const npm = (args, cwd) => run('npm', [...args, '--no-audit', '--no-fund'], { cwd, env: s.env, timeout: 240000 });

  async function runExample(dir) {
    fs.writeFileSync(path.join(dir, 'first-compaction.mjs'), readmeExample());
    const { stdout } = await run(process.execPath, ['first-compaction.mjs'], {
      cwd: dir,
      env: { ...s.env, COMPACTD_BIN: BIN },
      timeout: 60000,
    });
    assert.match(stdout, /^event: compaction_end \d+ tokens before$/m);
    assert.match(stdout, /^## Goal \| kept from entry [0-9a-f]{8}$/m);
  }

  test('npm install ./clients/typescript in the checkout, then the README example', async () => {
    const pkg = freshPackageCopy(path.join(s.tmp, 'a'));
    const checkout = path.resolve(pkg, '../..');
    await npm(['install', './clients/typescript'], checkout);
    await runExample(checkout);
  });

  test('npm install --install-links <path> from another project, then the README example', async () => {
    const pkg = freshPackageCopy(path.join(s.tmp, 'b'));
    const app = path.join(s.tmp, 'app');
    fs.mkdirSync(app);
    await npm(['install', '--install-links', pkg], app);
    assert.ok(!fs.lstatSync(path.join(app, 'node_modules/compactd-client')).isSymbolicLink(), 'a real copy');
    await runExample(app);
  });
});
