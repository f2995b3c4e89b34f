// compactd-client: a JSON-RPC 2.0 client for the compactd daemon, built on vscode-jsonrpc.
//
// Two transports, both with LSP-style `Content-Length` framing (the daemon detects the framing
// per connection from the first byte):
//   - `CompactdClient.spawnStdio({ bin })` spawns `compactd stdio` and talks over its stdin/stdout;
//   - `CompactdClient.connectSocket(path)` connects to `compactd serve --socket PATH`.
//
// Plain ESM JavaScript, no build step; `index.d.ts` next to this file carries the types.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import {
  createMessageConnection,
  ResponseError,
  SocketMessageReader,
  SocketMessageWriter,
  StreamMessageReader,
  StreamMessageWriter,
} from 'vscode-jsonrpc/node.js';

export { ResponseError };

/**
 * The binary to spawn: a path as given, or a bare name looked up on PATH. Throws a clear error
 * instead of letting `spawn` fail later with a bare ENOENT.
 */
function findBinary(bin, env) {
  const runnable = (p) => {
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return fs.statSync(p).isFile();
    } catch {
      return false;
    }
  };
  const notFound = () =>
    new Error(
      `compactd binary not found: '${bin}'. Set COMPACTD_BIN to its path, or install it on PATH ` +
        'with `cargo install --path .` in the compactd checkout',
    );
  if (bin.includes('/')) {
    if (!runnable(bin)) throw notFound();
    return bin;
  }
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    if (dir && runnable(path.join(dir, bin))) return path.join(dir, bin);
  }
  throw notFound();
}

/** Error codes of protocol.md §3 "Errors" (plus the JSON-RPC standard ones). */
export const ErrorCodes = Object.freeze({
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  UnknownSession: -32001,
  NotFound: -32002,
  InvalidSessionFile: -32003,
  Locked: -32004,
  NothingToCompact: -32010,
  AlreadyCompacted: -32011,
  Cancelled: -32012,
  SummarizationFailed: -32013,
  NoModel: -32014,
  Auth: -32015,
  Compacting: -32020,
  LeafMoved: -32021,
  EntryNotFound: -32022,
  Io: -32030,
  Overloaded: -32040,
  RequestCancelled: -32800,
});

/** Events the daemon sends to subscribed connections. */
export const EVENTS = Object.freeze([
  'compaction_start',
  'compaction_end',
  'summarization_retry_scheduled',
  'summarization_retry_attempt_start',
  'summarization_retry_finished',
  'subscription_dropped',
]);

/** Hooks a connection can register (`registerHooks`). */
export const HOOKS = Object.freeze([
  'session_before_compact',
  'session_compact',
  'session_compact_failed',
  'session_before_tree',
]);

const REQUEST_HOOKS = new Set(['session_before_compact', 'session_before_tree']);

/** Drops keys whose value is `undefined` so optional params are omitted, not sent as null. */
function defined(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) if (v !== undefined) out[k] = v;
  return out;
}

/** Pi's hook semantics: the last truthy result wins; a `{cancel: true}` stops the chain. */
async function runHandlers(handlers, params, token) {
  let last = null;
  for (const h of handlers) {
    const r = await h.fn(params, token);
    if (r) {
      last = r;
      if (r.cancel === true) break;
    }
  }
  return last;
}

export class CompactdClient {
  /**
   * Wraps an existing vscode-jsonrpc `MessageConnection` (not yet listening).
   * @param {import('vscode-jsonrpc').MessageConnection} connection
   * @param {{ onClose?: () => (void | Promise<void>) }} [options]
   */
  constructor(connection, options = {}) {
    this.connection = connection;
    this._onClose = options.onClose;
    this._listeners = new Map(); // event/notification name -> Set<callback>
    this._hooks = new Map(); // hook name -> [{ fn, sessionId }]
    this._closed = false;
    for (const name of [...EVENTS, 'session_compact', 'session_compact_failed']) {
      connection.onNotification(name, (params) => this._emit(name, params));
    }
    for (const name of REQUEST_HOOKS) {
      connection.onRequest(name, (params, token) => {
        const handlers = (this._hooks.get(name) ?? []).filter(
          (h) => h.sessionId === undefined || h.sessionId === params?.sessionId,
        );
        return runHandlers(handlers, params, token);
      });
    }
    connection.onClose(() => this._emit('close', undefined));
    connection.listen();
  }

  /**
   * Spawns `compactd stdio` and connects to it over stdin/stdout.
   * @param {{ bin?: string, args?: string[], env?: NodeJS.ProcessEnv, cwd?: string, stderr?: 'inherit' | 'ignore' | 'pipe' }} [options]
   */
  static spawnStdio(options = {}) {
    const bin = findBinary(options.bin ?? process.env.COMPACTD_BIN ?? 'compactd', options.env ?? process.env);
    const child = spawn(bin, ['stdio', ...(options.args ?? [])], {
      env: options.env ?? process.env,
      cwd: options.cwd,
      stdio: ['pipe', 'pipe', options.stderr ?? 'inherit'],
    });
    const connection = createMessageConnection(
      new StreamMessageReader(child.stdout),
      new StreamMessageWriter(child.stdin),
    );
    const exited = new Promise((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode);
      else child.once('exit', (code) => resolve(code));
    });
    const client = new CompactdClient(connection, {
      onClose: async () => {
        child.stdin.end();
        const timer = setTimeout(() => child.kill('SIGTERM'), 3000);
        await exited;
        clearTimeout(timer);
      },
    });
    client.process = child;
    client.exited = exited;
    return client;
  }

  /**
   * Connects to `compactd serve --socket PATH`.
   * @param {string} socketPath
   * @returns {Promise<CompactdClient>}
   */
  static connectSocket(socketPath) {
    return new Promise((resolve, reject) => {
      const socket = net.connect(socketPath);
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        const connection = createMessageConnection(
          new SocketMessageReader(socket),
          new SocketMessageWriter(socket),
        );
        const client = new CompactdClient(connection, {
          onClose: () =>
            new Promise((done) => {
              if (socket.destroyed) return done();
              socket.once('close', () => done());
              socket.end();
            }),
        });
        client.socket = socket;
        resolve(client);
      });
    });
  }

  /** Any method, raw. Rejects with a `ResponseError` ({code, message, data}) on a JSON-RPC error. */
  request(method, params) {
    return params === undefined
      ? this.connection.sendRequest(method)
      : this.connection.sendRequest(method, params);
  }

  /** Sends a notification (no reply). */
  notify(method, params) {
    return this.connection.sendNotification(method, params);
  }

  // --- session lifecycle -----------------------------------------------------------------

  initialize(params = {}) {
    return this.request('initialize', defined({ clientName: 'compactd-client', ...params }));
  }

  openSession({ path, create, cwd, model, thinkingLevel }) {
    return this.request('openSession', defined({ path, create, cwd, model, thinkingLevel }));
  }

  createSession({ cwd, sessionDir, model, thinkingLevel }) {
    return this.request('createSession', defined({ cwd, sessionDir, model, thinkingLevel }));
  }

  closeSession(sessionId) {
    return this.request('closeSession', { sessionId });
  }

  listSessions() {
    return this.request('listSessions', {});
  }

  // --- entries ---------------------------------------------------------------------------

  appendMessage(sessionId, message, { expectedLeafId } = {}) {
    return this.request('appendMessage', defined({ sessionId, message, expectedLeafId }));
  }

  appendEntry(sessionId, entry, { expectedLeafId } = {}) {
    return this.request('appendEntry', defined({ sessionId, entry, expectedLeafId }));
  }

  setModel(sessionId, model) {
    return this.request('setModel', { sessionId, model });
  }

  navigateTree(sessionId, targetId, options = {}) {
    return this.request('navigateTree', defined({ sessionId, targetId, ...options }));
  }

  getBranch(sessionId) {
    return this.request('getBranch', { sessionId });
  }

  getContext(sessionId, format) {
    return this.request('getContext', defined({ sessionId, format }));
  }

  // --- compaction ------------------------------------------------------------------------

  getContextUsage(sessionId) {
    return this.request('getContextUsage', { sessionId });
  }

  shouldCompact(params) {
    return this.request('shouldCompact', params);
  }

  previewCompaction(sessionId, detail) {
    return this.request('previewCompaction', defined({ sessionId, detail }));
  }

  compact(sessionId, { customInstructions } = {}) {
    return this.request('compact', defined({ sessionId, customInstructions }));
  }

  checkCompaction(sessionId, phase) {
    return this.request('checkCompaction', { sessionId, phase });
  }

  abortCompaction(sessionId) {
    return this.request('abortCompaction', { sessionId });
  }

  getSettings(sessionId) {
    return this.request('getSettings', { sessionId });
  }

  setSettingsOverrides({ sessionId, compaction: settings }) {
    return this.request('setSettingsOverrides', defined({ sessionId, compaction: settings }));
  }

  // --- events ----------------------------------------------------------------------------

  subscribe({ sessionId, events } = {}) {
    return this.request('subscribe', defined({ sessionId, events }));
  }

  unsubscribe() {
    return this.request('unsubscribe', {});
  }

  /**
   * Listens for an event or hook notification by name (`compaction_start`, `compaction_end`,
   * `session_compact`, ..., or `close`). Returns a function that removes the listener.
   */
  on(name, callback) {
    let set = this._listeners.get(name);
    if (!set) this._listeners.set(name, (set = new Set()));
    set.add(callback);
    return () => set.delete(callback);
  }

  onCompactionStart(callback) {
    return this.on('compaction_start', callback);
  }

  onCompactionEnd(callback) {
    return this.on('compaction_end', callback);
  }

  /** Resolves with the next `name` event whose params satisfy `predicate`. */
  waitFor(name, predicate = () => true, timeoutMs = 30000) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`timed out waiting for ${name}`));
      }, timeoutMs);
      const off = this.on(name, (params) => {
        if (!predicate(params)) return;
        clearTimeout(timer);
        off();
        resolve(params);
      });
    });
  }

  _emit(name, params) {
    for (const cb of this._listeners.get(name) ?? []) {
      try {
        cb(params);
      } catch (e) {
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }

  // --- hooks -----------------------------------------------------------------------------

  /** Low-level `registerHooks` (the daemon then sends those hook requests/notifications). */
  registerHooks({ sessionId, hooks, timeoutMs }) {
    return this.request('registerHooks', defined({ sessionId, hooks, timeoutMs }));
  }

  /**
   * Registers a hook handler and tells the daemon. For `session_before_compact` /
   * `session_before_tree` the handler's return value (or promise) is the reply:
   * `null | {cancel: true} | {compaction: {...}}` (resp. the tree shape). The handler gets
   * `(params, cancellationToken)`; the token fires when the daemon sends `$/cancelRequest`.
   * For `session_compact` / `session_compact_failed` it is called with the notification params.
   * Returns a function that removes the local handler (the daemon keeps asking; it gets `null`).
   */
  async addHook(hook, handler, { sessionId, timeoutMs } = {}) {
    if (!HOOKS.includes(hook)) throw new TypeError(`unknown hook ${hook}`);
    let remove;
    if (REQUEST_HOOKS.has(hook)) {
      const entry = { fn: handler, sessionId };
      const list = this._hooks.get(hook) ?? [];
      list.push(entry);
      this._hooks.set(hook, list);
      remove = () => {
        const l = this._hooks.get(hook) ?? [];
        const i = l.indexOf(entry);
        if (i >= 0) l.splice(i, 1);
      };
    } else {
      remove = this.on(hook, (params) => {
        if (sessionId === undefined || params?.sessionId === sessionId) handler(params);
      });
    }
    try {
      await this.registerHooks({ sessionId, hooks: [hook], timeoutMs });
    } catch (e) {
      remove();
      throw e;
    }
    return remove;
  }

  /** `session_before_compact`: answer with `null`, `{cancel: true}` or `{compaction: {...}}`. */
  onBeforeCompact(handler, options) {
    return this.addHook('session_before_compact', handler, options);
  }

  onBeforeTree(handler, options) {
    return this.addHook('session_before_tree', handler, options);
  }

  // --- teardown --------------------------------------------------------------------------

  /** Closes the connection (and, for stdio, waits for the daemon to exit). */
  async close() {
    if (this._closed) return;
    this._closed = true;
    this.connection.dispose();
    await this._onClose?.();
  }
}

/** Whether `e` is a JSON-RPC error response with `code`. */
export function isRpcError(e, code) {
  return e instanceof ResponseError && (code === undefined || e.code === code);
}
