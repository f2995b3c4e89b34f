// End-to-end tests of compactd-client's wire behaviour against a real daemon (stdio and Unix
// socket): events, hooks, cancellation, errors. Binary and sessions: see support.js.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { CompactdClient, ErrorCodes, isRpcError } from '../src/index.js';
import { BIN, MODEL, lines, missing, scratch, sessionCopy as copyInto } from './support.js';

let tmp;
let env;
let cleanup;
const sessionCopy = (caseName, name) => copyInto(tmp, caseName, name);

const compactions = (file) => lines(file).filter((e) => e.type === 'compaction');

/** Opens a session copy with a small keepRecentTokens so it has something to compact. */
async function openSmallKeep(client, file) {
  const info = await client.openSession({ path: file, model: MODEL });
  await client.setSettingsOverrides(info.sessionId, { compaction: { keepRecentTokens: 2000 } });
  return info;
}

/** `compactd serve --socket sock [extra]`, once its socket exists. */
async function serve(sock, extra = []) {
  const daemon = spawn(BIN, ['serve', '--socket', sock, ...extra], { env, stdio: ['ignore', 'ignore', 'ignore'] });
  const deadline = Date.now() + 60000;
  while (!fs.existsSync(sock)) {
    if (Date.now() > deadline || daemon.exitCode !== null) throw new Error('daemon did not start');
    await new Promise((r) => setTimeout(r, 25));
  }
  return daemon;
}

describe('compactd-client', { skip: missing }, () => {
  before(() => {
    ({ tmp, env, cleanup } = scratch());
  });

  after(() => cleanup?.());

  describe('over stdio (Content-Length framing)', () => {
    let client;
    before(async () => {
      client = await CompactdClient.spawnStdio({ bin: BIN, env, stderr: 'ignore' });
    });
    after(async () => {
      await client?.close();
      assert.equal(await client.exited, 0, 'daemon exits cleanly when stdin closes');
    });

    test('initialize answers with server info', async () => {
      const r = await client.initialize();
      assert.equal(r.serverName, 'compactd');
      assert.ok(r.capabilities.framings.includes('lsp'));
    });

    test('compact emits compaction_start then compaction_end before the reply', async () => {
      const file = sessionCopy('024-compacted-once', 'stdio-compact');
      const before = lines(file);
      const info = await openSmallKeep(client, file);
      assert.equal(info.isCompacting, false);
      assert.equal(info.entryCount, before.length - 1);

      const usage = await client.getContextUsage(info.sessionId);
      assert.equal(usage.contextWindow, MODEL.contextWindow);

      const events = [];
      const offStart = client.onCompactionStart((e) => events.push(['start', e]));
      const offEnd = client.onCompactionEnd((e) => events.push(['end', e]));
      assert.deepEqual(await client.subscribe(info.sessionId), { subscribed: true });

      const preview = await client.previewCompaction(info.sessionId);
      assert.equal(preview.nothingToCompact, undefined, JSON.stringify(preview));
      assert.equal(preview.hasPreviousSummary, true);

      let seenAtReply;
      const result = await client.compact(info.sessionId).then((r) => {
        seenAtReply = events.map(([k]) => k);
        return r;
      });
      offStart();
      offEnd();

      assert.deepEqual(seenAtReply, ['start', 'end'], 'both events arrive before the reply');
      const [[, start], [, end]] = events;
      assert.deepEqual(start, { sessionId: info.sessionId, reason: 'manual' });
      assert.equal(end.sessionId, info.sessionId);
      assert.equal(end.reason, 'manual');
      assert.equal(end.aborted, false);
      assert.equal(end.willRetry, false);
      assert.deepEqual(end.result, result);

      assert.match(result.summary, /## Goal/);
      assert.equal(result.firstKeptEntryId, preview.firstKeptEntryId);
      assert.equal(result.details.summarizer, 'extractive');

      const afterLines = lines(file);
      assert.equal(afterLines.length, before.length + 1, 'exactly one line appended');
      assert.deepEqual(afterLines.slice(0, before.length), before, 'earlier lines untouched');
      const added = afterLines.at(-1);
      assert.equal(added.type, 'compaction');
      assert.equal(added.summary, result.summary);
      assert.equal(added.firstKeptEntryId, result.firstKeptEntryId);
      assert.equal(added.fromHook, false);
      assert.equal(
        compactions(file).length,
        before.filter((e) => e.type === 'compaction').length + 1,
      );

      // The session is compacted now: a second compact is refused, nothing written.
      await assert.rejects(client.compact(info.sessionId), (e) => {
        assert.ok(isRpcError(e, ErrorCodes.AlreadyCompacted), String(e));
        assert.equal(e.message, 'Already compacted');
        return true;
      });
      assert.equal(lines(file).length, afterLines.length);
      await client.closeSession(info.sessionId);
    });

    test('a session_before_compact hook that cancels makes compact reject with -32012', async () => {
      const file = sessionCopy('005-medium-basic', 'stdio-cancel');
      const size = fs.statSync(file).size;
      const info = await openSmallKeep(client, file);
      await client.subscribe(info.sessionId, { events: ['compaction_end'] });
      const calls = [];
      const remove = await client.onBeforeCompact(
        (params) => {
          calls.push(params);
          return { cancel: true };
        },
        { sessionId: info.sessionId },
      );
      const ended = client.waitFor('compaction_end', (e) => e.sessionId === info.sessionId);
      await assert.rejects(client.compact(info.sessionId), (e) => {
        assert.ok(isRpcError(e, ErrorCodes.Cancelled), String(e));
        assert.equal(e.message, 'Compaction cancelled');
        assert.deepEqual(e.data, { kind: 'cancelled' });
        return true;
      });
      const end = await ended;
      assert.equal(end.aborted, true);
      assert.equal(end.result, undefined, 'result omitted on failure');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].sessionId, info.sessionId);
      assert.equal(calls[0].reason, 'manual');
      assert.equal(calls[0].willRetry, false);
      assert.ok(calls[0].preparation.firstKeptEntryId);
      assert.ok(Array.isArray(calls[0].branchEntries) && calls[0].branchEntries.length > 0);
      assert.equal(fs.statSync(file).size, size, 'a cancelled compaction writes nothing');
      remove();
      await client.closeSession(info.sessionId);
    });

    test('a session_before_compact hook can supply the compaction (fromHook: true)', async () => {
      const file = sessionCopy('005-medium-basic', 'stdio-hook-supplied');
      const before = lines(file);
      const info = await openSmallKeep(client, file);
      const compactedNotices = [];
      await client.addHook('session_compact', (p) => compactedNotices.push(p), {
        sessionId: info.sessionId,
      });
      const summary = '## Goal\nSummary written by the test hook.\n';
      const remove = await client.onBeforeCompact(
        ({ preparation }) => ({
          compaction: {
            summary,
            firstKeptEntryId: preparation.firstKeptEntryId,
            tokensBefore: preparation.tokensBefore,
            details: { by: 'test' },
          },
        }),
        { sessionId: info.sessionId },
      );
      const preview = await client.previewCompaction(info.sessionId);
      const result = await client.compact(info.sessionId);
      assert.equal(result.summary, summary);
      assert.equal(result.firstKeptEntryId, preview.firstKeptEntryId);
      assert.equal(result.tokensBefore, preview.tokensBefore);

      const afterLines = lines(file);
      assert.equal(afterLines.length, before.length + 1);
      const entry = afterLines.at(-1);
      assert.equal(entry.type, 'compaction');
      assert.equal(entry.fromHook, true);
      assert.equal(entry.summary, summary);
      assert.equal(entry.firstKeptEntryId, preview.firstKeptEntryId);
      assert.deepEqual(entry.details, { by: 'test' });

      // session_compact is a notification sent after the entry is written.
      const deadline = Date.now() + 30000;
      while (compactedNotices.length === 0 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(compactedNotices.length, 1);
      assert.equal(compactedNotices[0].fromExtension, true);
      assert.equal(compactedNotices[0].compactionEntry.id, entry.id);
      remove();
      await client.closeSession(info.sessionId);
    });

    test('errors come back as ResponseError with protocol codes', async () => {
      await assert.rejects(client.getContextUsage('no-such-session'), (e) => {
        assert.ok(isRpcError(e, ErrorCodes.UnknownSession), String(e));
        assert.deepEqual(e.data, { kind: 'unknown_session' });
        return true;
      });
      await assert.rejects(client.openSession({ path: 'relative.jsonl' }), (e) =>
        isRpcError(e, ErrorCodes.InvalidParams),
      );
      await assert.rejects(client.request('noSuchMethod', {}), (e) =>
        isRpcError(e, ErrorCodes.MethodNotFound),
      );
    });
  });

  describe('over a Unix socket', () => {
    let daemon;
    let sock;
    before(async () => {
      sock = path.join(tmp, 'run', 'test.sock');
      daemon = await serve(sock);
    });
    after(async () => {
      if (daemon && daemon.exitCode === null) {
        const exited = new Promise((r) => daemon.once('exit', r));
        daemon.kill('SIGTERM');
        await exited;
      }
      assert.equal(fs.existsSync(sock), false, 'socket removed on SIGTERM');
    });

    test('two clients share a session; the watcher sees the other one compact', async () => {
      const agent = await CompactdClient.connectSocket(sock);
      const watcher = await CompactdClient.connectSocket(sock);
      try {
        const file = sessionCopy('005-medium-basic', 'socket-shared');
        const a = await openSmallKeep(agent, file);
        const w = await watcher.openSession({ path: file });
        assert.equal(w.sessionId, a.sessionId, 'same file, same sessionId');
        await watcher.subscribe(w.sessionId);
        const seen = [];
        watcher.onCompactionStart((e) => seen.push(['start', e.reason]));
        const end = watcher.waitFor('compaction_end', (e) => e.sessionId === w.sessionId);

        const appended = await agent.appendMessage(a.sessionId, {
          role: 'user',
          content: [{ type: 'text', text: 'one more request from the socket client' }],
        });
        assert.ok(appended.entryId);
        const result = await agent.compact(a.sessionId);
        const e = await end;
        assert.deepEqual(seen, [['start', 'manual']]);
        assert.equal(e.aborted, false);
        assert.equal(e.result.summary, result.summary);
        assert.match(result.summary, /## Goal/);
        assert.equal(compactions(file).length, 1);
        const listed = await watcher.listSessions();
        assert.ok(listed.some((s) => s.sessionId === w.sessionId && !s.isCompacting));
      } finally {
        await agent.close();
        await watcher.close();
      }
    });
  });

  describe('a daemon that stops answering', () => {
    let daemon;
    let sock;
    before(async () => {
      sock = path.join(tmp, 'run', 'stopped.sock');
      daemon = await serve(sock, ['--max-frame', '300']);
    });
    after(async () => {
      if (daemon && daemon.exitCode === null) {
        daemon.kill('SIGCONT');
        const exited = new Promise((r) => daemon.once('exit', r));
        daemon.kill('SIGTERM');
        await exited;
      }
    });

    /** SIGSTOP, and waits until every thread of the daemon has stopped. */
    async function stop() {
      daemon.kill('SIGSTOP');
      const stopped = () =>
        fs
          .readdirSync(`/proc/${daemon.pid}/task`)
          .every((t) => fs.readFileSync(`/proc/${daemon.pid}/task/${t}/stat`, 'utf8').replace(/^.*\) /s, '')[0] === 'T');
      while (!stopped()) await new Promise((r) => setTimeout(r, 10));
    }

    test('an answer with a null id fails the call it belongs to at once', async () => {
      const client = await CompactdClient.connectSocket(sock);
      try {
        await client.request('initialize', {});
        const started = Date.now();
        // Over --max-frame: the daemon cannot read its id and answers with `id: null` (and,
        // an LSP length it cannot trust, closes the connection after it).
        await assert.rejects(client.request('initialize', { clientName: 'x'.repeat(400) }), (e) =>
          isRpcError(e, ErrorCodes.InvalidRequest) && Number.isInteger(e.data?.frameBytes),
        );
        assert.ok(Date.now() - started < 10000, 'failed at once, not after its timeout');
      } finally {
        await client.close();
      }
    });

    test('a stopped daemon fails the call after its timeout, naming the socket and the pid', async () => {
      const client = await CompactdClient.connectSocket(sock);
      try {
        await client.request('initialize', {});
        await stop();
        client.timeoutMs = 1000;
        const started = Date.now();
        await assert.rejects(client.listSessions(), (e) => {
          assert.equal(e.name, 'DaemonNotAnsweringError');
          assert.equal(e.code, 'ETIMEDOUT');
          assert.ok(e.message.includes(sock) && e.message.includes(`pid ${daemon.pid}`), e.message);
          return true;
        });
        assert.ok(Date.now() - started < 10000);
        daemon.kill('SIGCONT');
        client.timeoutMs = 10000;
        assert.deepEqual(await client.listSessions(), [], 'answers again once resumed');
      } finally {
        daemon.kill('SIGCONT');
        await client.close();
      }
    });
  });
});
