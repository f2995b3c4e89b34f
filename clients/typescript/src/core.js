// The connection machinery of compactd-client, written by hand: LSP-style `Content-Length`
// framing (the daemon detects the framing per connection from the first byte), written here in
// a few dozen lines so the package `npm pack` makes is self-contained (nothing for a later
// `npm install` to prune, nothing to bundle); the stdio and socket transports; events; hooks.
// The protocol's methods, types and names are generated from proto-docs/openrpc.json
// (`python3 clients/generate.py`): `CompactdClient` in index.js extends `ClientCore`.
//
// Transports:
//   - `await CompactdClient.spawnStdio({ bin })` spawns `compactd stdio` (binary: `bin`, else
//     $COMPACTD_BIN, else `compactd` on PATH) and talks over its stdin/stdout;
//   - `await CompactdClient.connect()` connects to a running `compactd serve` on its default socket
//     (`connectSocket(path)` for another one);
//   - `await CompactdClient.connectOrStart()` starts that daemon first when none answers (what
//     `compactd connect` does for editors), so an agent and an editor share one daemon.
// All reject with a `CompactdConnectError` saying what is missing instead of crashing the process.
//
// Plain ESM JavaScript, no build step; `core.d.ts` next to this file carries the types.

import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

import { EVENTS, HOOKS, NOTICES, REQUEST_HOOKS as REQUEST_HOOK_NAMES, TASK_METHODS } from './protocol.js';

/** Default wait for a reply, milliseconds: the daemon answers everything but a compaction's
 * work in milliseconds. */
export const DEFAULT_TIMEOUT_MS = 120000;
/** Default wait for a method the daemon runs as a task (`x-run: "task"`: a compaction with a
 * real summarizer model can take minutes). */
export const TASK_TIMEOUT_MS = 600000;
const TASKS = new Set(TASK_METHODS);

/** A JSON-RPC error response: `code`, `message` and `data`. */
export class ResponseError extends Error {
  constructor(code, message, data) {
    super(message);
    this.name = 'ResponseError';
    this.code = code;
    this.data = data;
  }
}

/** A JSON-RPC error reply: `code`, `message` (Pi's text where Pi has one) and `kind`
 * (`error.data.kind`, e.g. `'already_compacted'`). A `ResponseError`, so `isRpcError` holds. */
export class CompactdError extends ResponseError {
  constructor(code, message, data) {
    super(code, message, data);
    this.name = 'CompactdError';
    this.kind = data && typeof data === 'object' ? data.kind : undefined;
  }
}

/** The daemon cannot be reached: no binary to spawn, or nothing listening on the socket. */
export class CompactdConnectError extends Error {
  constructor(message, cause) {
    super(message, { cause });
    this.name = 'CompactdConnectError';
    this.code = cause?.code;
  }
}

/** A socket that is not the user's own: its directory is another user's or open to others, or
 * the socket file is another user's. Never joined, and `connectOrStart` starts nothing over it. */
export class NotYourDaemonError extends CompactdConnectError {
  constructor(message) {
    super(message);
    this.name = 'NotYourDaemonError';
    this.code = 'EPERM';
  }
}

/** The daemon sent no answer within a call's timeout: it is stopped (SIGSTOP: the kernel still
 * accepts connections for it) or wedged. Names the socket and the daemon's pid where known. */
export class DaemonNotAnsweringError extends Error {
  constructor(method, timeoutMs, peer = {}) {
    const where = peer.socket ? `the daemon on ${peer.socket}` : 'the daemon';
    const who = peer.pid !== undefined ? `${where} (pid ${peer.pid})` : where;
    const hint =
      peer.pid !== undefined
        ? `it may be stopped (resume it with \`kill -CONT ${peer.pid}\`) or wedged (\`kill ${peer.pid}\` ends it)`
        : 'it may be stopped or wedged';
    super(`${who} did not answer \`${method}\` within ${timeoutMs / 1000} s: ${hint}`);
    this.name = 'DaemonNotAnsweringError';
    this.code = 'ETIMEDOUT';
    this.method = method;
    this.timeoutMs = timeoutMs;
    this.socket = peer.socket;
    this.pid = peer.pid;
  }
}

/**
 * The pid of the process listening on the Unix socket `socketPath`, where the system tells
 * (Linux: the socket's inode in `/proc/net/unix`, then the process of this user holding it).
 * Node cannot read a connection's peer credentials; this is read only to name a daemon that
 * does not answer. `undefined` when it cannot be found.
 */
export function daemonPid(socketPath) {
  try {
    const listening = fs
      .readFileSync('/proc/net/unix', 'utf8')
      .split('\n')
      .map((line) => line.trim().split(/\s+/))
      // Num RefCount Protocol Flags Type St Inode Path; flag 00010000: listening.
      .find((f) => f.length >= 8 && f.slice(7).join(' ') === socketPath && (parseInt(f[3], 16) & 0x10000) !== 0);
    if (!listening) return undefined;
    const target = `socket:[${listening[6]}]`;
    for (const pid of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      let fds;
      try {
        fds = fs.readdirSync(`/proc/${pid}/fd`);
      } catch {
        continue;
      }
      for (const fd of fds) {
        try {
          if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === target) return Number(pid);
        } catch {
          // gone meanwhile
        }
      }
    }
  } catch {
    // no /proc
  }
  return undefined;
}

/**
 * The waiting calls an error reply with a null id can belong to. Such a reply answers a frame
 * the daemon could not read an id from (not JSON, over its size limit, skipped for lack of
 * buffer); the daemon names that frame's size in `data.frameBytes`, so it belongs to the calls
 * whose request had that size. A daemon that names no size leaves every waiting call a candidate.
 * @param {Map<number, {size: number}>} pending
 */
export function unreadableTargets(pending, error) {
  const size = error?.data?.frameBytes;
  return [...pending.entries()].filter(([, p]) => !Number.isInteger(size) || p.size === size).map(([id]) => id);
}

/** The per-user runtime directory of the default socket, by the daemon's rule (Rust:
 * `transport::unix::runtime_dir`): `$COMPACTD_RUNTIME_DIR`, else `/run/user/<uid>` when it is a
 * directory of this user, else `$XDG_RUNTIME_DIR`; `undefined` when none applies. The standard
 * directory comes before the variable because hosts (MCP hosts, service managers, editors) start
 * their children with a reduced environment that drops it. */
export function runtimeDir(env = process.env) {
  if (env.COMPACTD_RUNTIME_DIR) return env.COMPACTD_RUNTIME_DIR;
  const uid = currentUid();
  const standard = `/run/user/${uid}`;
  try {
    const st = fs.lstatSync(standard);
    if (st.isDirectory() && st.uid === uid) return standard;
  } catch {
    // no such directory: the next rule
  }
  return env.XDG_RUNTIME_DIR || undefined;
}

/** Where `compactd serve` listens by default, computed as the daemon does:
 * `<runtimeDir()>/compactd/compactd.sock`, else `/tmp/compactd-<uid>/compactd.sock`. */
export function defaultSocketPath(env = process.env) {
  const runtime = runtimeDir(env);
  if (runtime) return path.join(runtime, 'compactd', 'compactd.sock');
  return path.join('/tmp', `compactd-${currentUid()}`, 'compactd.sock');
}

/** The uid of this process. */
function currentUid() {
  return typeof process.getuid === 'function' ? process.getuid() : os.userInfo().uid;
}

/**
 * Checks the directory of `socketPath` before connecting to anything in it, by the rule
 * `compactd serve` applies before binding there (Rust: `transport::unix::check_socket_dir`). A
 * directory that does not exist holds no daemon to join. The default socket's directory must be
 * a real directory of this user with no access for group or others; another one (an explicit
 * socket), after links, must be this user's or root's and, when group or others may write to
 * it, sticky (as /tmp). Throws a `NotYourDaemonError` naming the directory and its owner.
 */
export function checkSocketDir(socketPath, env = process.env) {
  const dir = path.dirname(socketPath);
  let st;
  try {
    st = fs.lstatSync(dir);
  } catch (e) {
    if (e.code === 'ENOENT') return;
    throw e;
  }
  const uid = currentUid();
  const isPrivate = path.normalize(dir) === path.normalize(path.dirname(defaultSocketPath(env)));
  if (st.isSymbolicLink()) {
    if (isPrivate) throw new NotYourDaemonError(`refusing socket directory ${dir}: it is a symbolic link`);
    st = fs.statSync(dir);
  }
  if (!st.isDirectory()) throw new NotYourDaemonError(`refusing socket directory ${dir}: not a directory`);
  const mode = st.mode & 0o7777;
  const octal = mode.toString(8).padStart(4, '0');
  if (isPrivate) {
    if (st.uid !== uid) {
      throw new NotYourDaemonError(
        `refusing socket directory ${dir}: owned by uid ${st.uid}, not by this user (uid ${uid}); another user may have created it to intercept clients`,
      );
    }
    if (mode & 0o077) {
      throw new NotYourDaemonError(
        `refusing socket directory ${dir}: mode ${octal} lets other users in (expected 0700; fix it with chmod 700 or remove it)`,
      );
    }
  } else {
    if (st.uid !== uid && st.uid !== 0) {
      throw new NotYourDaemonError(
        `refusing socket directory ${dir}: owned by uid ${st.uid}, neither this user (uid ${uid}) nor root`,
      );
    }
    if (mode & 0o022 && !(mode & 0o1000)) {
      throw new NotYourDaemonError(
        `refusing socket directory ${dir}: mode ${octal} lets other users replace the socket (not sticky)`,
      );
    }
  }
}

/**
 * Refuses a socket file another user owns. Node cannot read the peer's credentials
 * (`SO_PEERCRED`), so the socket file's owner (the user whose daemon bound it), together with
 * `checkSocketDir`'s rule that no other user can replace it, stands in for the peer's uid.
 */
function checkSocketOwner(socketPath) {
  const uid = currentUid();
  const owner = fs.lstatSync(socketPath).uid;
  if (owner !== uid) {
    throw new NotYourDaemonError(
      `refusing the daemon on ${socketPath}: its socket belongs to uid ${owner}, not to this user (uid ${uid}); another user may be listening there to intercept clients`,
    );
  }
}

/** Fires once when the daemon withdraws a hook request (`$/cancelRequest`). */
class CancellationToken {
  constructor() {
    this.isCancellationRequested = false;
    this._listeners = [];
  }

  onCancellationRequested(listener) {
    if (this.isCancellationRequested) listener();
    else this._listeners.push(listener);
    return { dispose: () => (this._listeners = this._listeners.filter((l) => l !== listener)) };
  }

  _cancel() {
    if (this.isCancellationRequested) return;
    this.isCancellationRequested = true;
    for (const l of this._listeners.splice(0)) l();
  }
}

/**
 * One JSON-RPC connection over a byte stream pair in LSP framing: requests matched to replies by
 * id, notifications to handlers by method, server→client requests to request handlers (with a
 * cancellation token for `$/cancelRequest`).
 */
export class Connection {
  constructor(readable, writable) {
    this._in = readable;
    this._out = writable;
    this._buffer = Buffer.alloc(0);
    this._nextId = 1;
    this._pending = new Map();
    this._notificationHandlers = new Map();
    this._requestHandlers = new Map();
    this._tokens = new Map();
    this._closeHandlers = [];
    this.closed = false;
    /** Who answers (`{socket, pid}`), named when a call gets no answer in time; `pid` may be a
     * function that looks it up then. */
    this.peer = {};
  }

  onNotification(method, handler) {
    this._notificationHandlers.set(method, handler);
  }

  onRequest(method, handler) {
    this._requestHandlers.set(method, handler);
  }

  onClose(handler) {
    this._closeHandlers.push(handler);
  }

  listen() {
    this._in.on('data', (chunk) => this._receive(chunk));
    const end = () => this._close();
    this._in.on('end', end);
    this._in.on('close', end);
    this._in.on('error', end);
  }

  /** Writes one message; the size of its body in bytes, or `undefined` when closed. */
  _write(msg) {
    if (this.closed || this._out.destroyed || this._out.writableEnded) return undefined;
    const body = Buffer.from(JSON.stringify(msg), 'utf8');
    this._out.write(Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, 'ascii'), body]));
    return body.length;
  }

  /** Resolves with the result, rejects with a `ResponseError`, or with a
   * `DaemonNotAnsweringError` when `timeoutMs` passes with no answer (none: waits as long as
   * it takes). */
  sendRequest(method, params, timeoutMs) {
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      if (this.closed) return reject(new ResponseError(-32099, 'the connection to compactd is closed'));
      const msg = { jsonrpc: '2.0', id, method };
      if (params !== undefined) msg.params = params;
      const entry = { resolve, reject, size: undefined, timer: undefined };
      this._pending.set(id, entry);
      entry.size = this._write(msg);
      if (timeoutMs !== undefined && timeoutMs !== null) {
        entry.timer = setTimeout(() => {
          if (this._pending.get(id) !== entry) return;
          this._pending.delete(id);
          const pid = typeof this.peer.pid === 'function' ? this.peer.pid() : this.peer.pid;
          reject(new DaemonNotAnsweringError(method, timeoutMs, { socket: this.peer.socket, pid }));
        }, timeoutMs);
      }
    });
  }

  /** Takes a waiting call off the table (its timer stopped). */
  _settle(id) {
    const p = this._pending.get(id);
    if (!p) return undefined;
    this._pending.delete(id);
    clearTimeout(p.timer);
    return p;
  }

  sendNotification(method, params) {
    const msg = { jsonrpc: '2.0', method };
    if (params !== undefined) msg.params = params;
    this._write(msg);
    return Promise.resolve();
  }

  _receive(chunk) {
    this._buffer = Buffer.concat([this._buffer, chunk]);
    for (;;) {
      const headerEnd = this._buffer.indexOf('\r\n\r\n');
      if (headerEnd < 0) return;
      const header = this._buffer.subarray(0, headerEnd).toString('ascii');
      const m = /^content-length:\s*(\d+)\s*$/im.exec(header);
      if (!m) {
        // Not a frame the daemon writes: drop the bad header and look for the next one.
        this._buffer = this._buffer.subarray(headerEnd + 4);
        continue;
      }
      const length = Number(m[1]);
      const start = headerEnd + 4;
      if (this._buffer.length < start + length) return;
      const body = this._buffer.subarray(start, start + length).toString('utf8');
      this._buffer = this._buffer.subarray(start + length);
      let msg;
      try {
        msg = JSON.parse(body);
      } catch {
        continue;
      }
      for (const one of Array.isArray(msg) ? msg : [msg]) this._dispatch(one);
    }
  }

  _dispatch(msg) {
    if (!msg || typeof msg !== 'object') return;
    if (typeof msg.method === 'string') {
      if (msg.id !== undefined && msg.id !== null) return this._serve(msg);
      if (msg.method === '$/cancelRequest') return this._tokens.get(msg.params?.id)?._cancel();
      const h = this._notificationHandlers.get(msg.method);
      if (h) h(msg.params);
      return;
    }
    if (msg.id === null && msg.error) {
      // An error with a null id fails the waiting calls it can belong to.
      for (const id of unreadableTargets(this._pending, msg.error)) {
        this._settle(id).reject(new ResponseError(msg.error.code, msg.error.message, msg.error.data));
      }
      return;
    }
    const p = this._settle(msg.id);
    if (!p) return;
    if (msg.error) p.reject(new ResponseError(msg.error.code, msg.error.message, msg.error.data));
    else p.resolve(msg.result);
  }

  async _serve(msg) {
    const h = this._requestHandlers.get(msg.method);
    if (!h) {
      this._write({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: `not handled: ${msg.method}` } });
      return;
    }
    const token = new CancellationToken();
    this._tokens.set(msg.id, token);
    try {
      const result = await h(msg.params, token);
      this._write({ jsonrpc: '2.0', id: msg.id, result: result ?? null });
    } catch (e) {
      this._write({ jsonrpc: '2.0', id: msg.id, error: { code: -32603, message: String(e?.message ?? e) } });
    } finally {
      this._tokens.delete(msg.id);
    }
  }

  _close() {
    if (this.closed) return;
    this.closed = true;
    for (const id of [...this._pending.keys()]) {
      this._settle(id).reject(new ResponseError(-32099, 'compactd closed the connection'));
    }
    for (const t of this._tokens.values()) t._cancel();
    for (const h of this._closeHandlers) h();
  }

  dispose() {
    this._close();
  }
}

/** Forwards a readable stream's lines (the daemon's stderr) to `log`. */
function forwardLines(stream, log) {
  let rest = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk) => {
    const lines = (rest + chunk).split('\n');
    rest = lines.pop();
    for (const l of lines) if (l.trim()) log(l);
  });
  stream.on('end', () => {
    if (rest.trim()) log(rest);
  });
}

/** Where the daemon's stderr (only real errors) goes when no `log` is given. */
const defaultLog = (line) => console.error(`compactd: ${line}`);

const REQUEST_HOOKS = new Set(REQUEST_HOOK_NAMES);
/** The hooks the daemon only tells (`session_compact`, …): delivered like events. */
const NOTIFICATION_HOOKS = HOOKS.filter((h) => !REQUEST_HOOKS.has(h));

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

/** The hand-written part of `CompactdClient` (index.js): connecting, raw requests, events,
 * hooks and teardown. Its static constructors make an instance of the class they are called on. */
export class ClientCore {
  /**
   * Wraps a `Connection` (not yet listening).
   * @param {Connection} connection
   * @param {{ onClose?: () => (void | Promise<void>) }} [options]
   */
  constructor(connection, options = {}) {
    this.connection = connection;
    this._onClose = options.onClose;
    this._listeners = new Map(); // event/notification name -> Set<callback>
    this._hooks = new Map(); // hook name -> [{ fn, sessionId }]
    this._closed = false;
    for (const name of [...EVENTS, ...NOTICES, ...NOTIFICATION_HOOKS]) {
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
    /** Default wait for a reply, milliseconds (`null`: wait as long as it takes); the methods
     * the daemon runs as tasks wait `taskTimeoutMs`. Past it a call rejects with a
     * `DaemonNotAnsweringError` naming the socket and the daemon's pid. */
    this.timeoutMs = DEFAULT_TIMEOUT_MS;
    this.taskTimeoutMs = TASK_TIMEOUT_MS;
  }

  /**
   * Spawns `compactd stdio` and connects to it over stdin/stdout. The binary is `bin`, else
   * `$COMPACTD_BIN`, else `compactd` on PATH; when it cannot be started the promise rejects with
   * a `CompactdConnectError` naming it.
   * The daemon logs to its log file; its stderr carries only real errors, which go to
   * `options.log` (default: `console.error`) unless `stderr` is `'inherit'` or `'ignore'`.
   * @param {{ bin?: string, args?: string[], env?: Record<string, string | undefined>, cwd?: string, stderr?: 'log' | 'inherit' | 'ignore', log?: (line: string) => void }} [options]
   * @returns {Promise<CompactdClient>}
   */
  static spawnStdio(options = {}) {
    const bin = options.bin ?? (options.env ?? process.env).COMPACTD_BIN ?? 'compactd';
    const stderr = options.stderr ?? 'log';
    return new Promise((resolve, reject) => {
      let child;
      try {
        child = spawn(bin, ['stdio', ...(options.args ?? [])], {
          env: options.env ?? process.env,
          cwd: options.cwd,
          stdio: ['pipe', 'pipe', stderr === 'log' ? 'pipe' : stderr],
        });
      } catch (e) {
        reject(new CompactdConnectError(`cannot start compactd (${bin}): ${e.message}`, e));
        return;
      }
      child.once('error', (e) => {
        const hint =
          e.code === 'ENOENT'
            ? `compactd binary not found: ${bin} (set COMPACTD_BIN to its path or put compactd on PATH)`
            : `cannot start compactd (${bin}): ${e.message}`;
        reject(new CompactdConnectError(hint, e));
      });
      child.once('spawn', () => {
        // From here on a failing pipe ends the connection; it must not crash the process.
        child.on('error', () => {});
        child.stdin.on('error', () => {});
        if (stderr === 'log') forwardLines(child.stderr, options.log ?? defaultLog);
        const connection = new Connection(child.stdout, child.stdin);
        connection.peer = { pid: child.pid };
        const exited = new Promise((done) => {
          if (child.exitCode !== null) done(child.exitCode);
          else child.once('exit', (code) => done(code));
        });
        const client = new this(connection, {
          onClose: async () => {
            child.stdin.end();
            const timer = setTimeout(() => child.kill('SIGTERM'), 3000);
            await exited;
            clearTimeout(timer);
          },
        });
        client.process = child;
        client.exited = exited;
        resolve(client);
      });
    });
  }

  /**
   * Connects to a running `compactd serve`: `socketPath`, else its default socket
   * (`defaultSocketPath()`). Rejects with a `CompactdConnectError` when nothing listens there.
   * @param {string} [socketPath]
   * @returns {Promise<CompactdClient>}
   */
  static connect(socketPath) {
    return this.connectSocket(socketPath ?? defaultSocketPath());
  }

  /**
   * Connects to `compactd serve --socket PATH`.
   * @param {string} socketPath
   * @returns {Promise<CompactdClient>}
   */
  static connectSocket(socketPath, env = process.env) {
    return new Promise((resolve, reject) => {
      try {
        checkSocketDir(socketPath, env);
      } catch (e) {
        reject(e instanceof CompactdConnectError ? e : new CompactdConnectError(`cannot check ${socketPath}: ${e.message}`, e));
        return;
      }
      const socket = net.connect(socketPath);
      const fail = (e) => {
        const why =
          e.code === 'ENOENT' || e.code === 'ECONNREFUSED'
            ? `no compactd daemon listening on ${socketPath} (${e.code}); start one with \`compactd serve\``
            : `cannot connect to compactd at ${socketPath}: ${e.message}`;
        reject(new CompactdConnectError(why, e));
      };
      socket.once('error', fail);
      socket.once('connect', () => {
        socket.off('error', fail);
        try {
          checkSocketOwner(socketPath);
        } catch (e) {
          socket.destroy();
          reject(e instanceof CompactdConnectError ? e : new CompactdConnectError(`cannot check ${socketPath}: ${e.message}`, e));
          return;
        }
        socket.on('error', () => {}); // a reset ends the connection (close), never the process
        const connection = new Connection(socket, socket);
        connection.peer = { socket: socketPath, pid: () => daemonPid(socketPath) };
        const client = new this(connection, {
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

  /**
   * Connects to the daemon on `socketPath` (default: its default socket), first starting one in
   * the background when none answers (`compactd start`, as `compactd connect` does for
   * editors). Rejects with a `CompactdConnectError` when there is no binary or it cannot start.
   * @param {{ socketPath?: string, bin?: string, env?: Record<string, string | undefined> }} [options]
   * @returns {Promise<CompactdClient>}
   */
  static async connectOrStart(options = {}) {
    const env = options.env ?? process.env;
    const socketPath = options.socketPath ?? defaultSocketPath(env);
    try {
      return await this.connectSocket(socketPath, env);
    } catch (e) {
      if (!(e instanceof CompactdConnectError) || e instanceof NotYourDaemonError) throw e;
    }
    const bin = options.bin ?? env.COMPACTD_BIN ?? 'compactd';
    await new Promise((resolve, reject) => {
      execFile(bin, ['start', '--socket', socketPath], { env, timeout: 60000 }, (err, _stdout, stderr) => {
        if (!err) return resolve();
        const why =
          err.code === 'ENOENT'
            ? `compactd binary not found: ${bin} (set COMPACTD_BIN to its path or put compactd on PATH)`
            : `could not start a compactd daemon on ${socketPath}: ${String(stderr).trim() || err.message}`;
        reject(new CompactdConnectError(why, err));
      });
    });
    return this.connectSocket(socketPath, env);
  }

  /**
   * Asks for the daemon's log lines as `window/logMessage` notifications and passes each to
   * `log(level, message)` (`level`: 'error' | 'warn' | 'info' | 'debug'). Returns a remover.
   * @param {(level: string, message: string) => void} log
   */
  async forwardDaemonLog(log) {
    const levels = { 1: 'error', 2: 'warn', 3: 'info', 4: 'debug' };
    const off = this.on('window/logMessage', (p) => log(levels[p?.type] ?? 'info', String(p?.message ?? '')));
    await this.request('initialize', { logNotifications: true });
    return off;
  }

  /** Any method, raw. Rejects with a `CompactdError` ({code, kind, message, data}) on a JSON-RPC
   * error, and with a `DaemonNotAnsweringError` when no answer comes within `options.timeoutMs`
   * (default: `taskTimeoutMs` for the methods the daemon runs as tasks, else `timeoutMs`). */
  async request(method, params, options = {}) {
    const timeoutMs =
      options.timeoutMs !== undefined ? options.timeoutMs : TASKS.has(method) ? this.taskTimeoutMs : this.timeoutMs;
    try {
      return await this.connection.sendRequest(method, params, timeoutMs);
    } catch (e) {
      if (e instanceof ResponseError && !(e instanceof CompactdError)) {
        throw new CompactdError(e.code, e.message, e.data);
      }
      throw e;
    }
  }

  /** A protocol method with its params object, `undefined` values left out (optional params are
   * omitted, not sent as null): what every generated method of `CompactdClient` calls. */
  _call(method, params) {
    return this.request(method, defined(params));
  }

  /** Sends a notification (no reply). */
  notify(method, params) {
    return this.connection.sendNotification(method, params);
  }

  // --- events ----------------------------------------------------------------------------

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

  /**
   * The events from now on as an async iterator of `{ name, params }` (optionally only `names`,
   * or one session's); it ends when the connection closes or `return()` is called (`break`).
   */
  events({ names, sessionId } = {}) {
    const queue = [];
    let wake = null;
    let done = false;
    const wanted = names ? new Set(names) : null;
    const offs = [...EVENTS, ...NOTIFICATION_HOOKS]
      .filter((n) => !wanted || wanted.has(n))
      .map((name) =>
        this.on(name, (params) => {
          if (sessionId !== undefined && params?.sessionId !== sessionId) return;
          queue.push({ name, params });
          wake?.();
        }),
      );
    const stop = () => {
      done = true;
      for (const off of offs) off();
      offClose();
      wake?.();
    };
    const offClose = this.on('close', stop);
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        while (queue.length === 0 && !done) await new Promise((r) => (wake = r));
        wake = null;
        if (queue.length > 0) return { value: queue.shift(), done: false };
        return { value: undefined, done: true };
      },
      async return() {
        stop();
        return { value: undefined, done: true };
      },
    };
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
        // A failing listener is reported; it must not take the connection (or process) down.
        console.error(`compactd-client: a '${name}' listener threw:`, e);
      }
    }
  }

  // --- hooks -----------------------------------------------------------------------------

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
      await this._call('registerHooks', { hooks: [hook], sessionId, timeoutMs });
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
