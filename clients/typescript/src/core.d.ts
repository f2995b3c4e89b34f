// Types of compactd-client's hand-written machinery (core.js): errors, the connection, the
// transports, events and hooks. The protocol's own types (results, event params, one method per
// protocol method) are generated into index.d.ts, which re-exports this file.
//
// Self-contained: no Node.js or other package types are needed. The two lib references below
// bring in what these types use beyond ES5 (the Promise constructor, async iterators), so a
// plain `tsc --strict` with no target or lib option checks a file that imports the package.
/// <reference lib="es2015.promise" />
/// <reference lib="es2018.asynciterable" />

import type { EventName, EventParams, HookName, HookParams, HookReplies } from './index.js';

/** A JSON-RPC error response. */
export declare class ResponseError extends Error {
  constructor(code: number, message: string, data?: unknown);
  readonly code: number;
  readonly data: unknown;
}

/** A JSON-RPC error reply; `kind` is `error.data.kind` (e.g. `'already_compacted'`). */
export declare class CompactdError extends ResponseError {
  readonly kind: string | undefined;
}

/** The daemon cannot be reached (no binary to spawn, nothing on the socket, a socket that is not
 * the user's own); `code` is the OS error code, or `EPERM` for a refused socket. */
export declare class CompactdConnectError extends Error {
  readonly code: string | undefined;
}

/** The socket is not the user's own (its directory is another user's or open to others, or the
 * socket file is another user's); `code` is `EPERM`. Never joined. */
export declare class NotYourDaemonError extends CompactdConnectError {}

/** The daemon sent no answer within a call's timeout (it is stopped or wedged); `code` is
 * `ETIMEDOUT`. The message names the socket and the daemon's pid where known. */
export declare class DaemonNotAnsweringError extends Error {
  constructor(method: string, timeoutMs: number, peer?: { socket?: string; pid?: number });
  readonly code: 'ETIMEDOUT';
  readonly method: string;
  readonly timeoutMs: number;
  readonly socket: string | undefined;
  readonly pid: number | undefined;
}

/** Default wait for a reply, milliseconds. */
export declare const DEFAULT_TIMEOUT_MS: number;
/** Default wait for a method the daemon runs as a task (a compaction), milliseconds. */
export declare const TASK_TIMEOUT_MS: number;

/** The pid of the process listening on the Unix socket `socketPath` (Linux, from `/proc`). */
export declare function daemonPid(socketPath: string): number | undefined;

/** The ids of the waiting calls an error reply with a null id can belong to (those whose request
 * frame had the size the daemon names in `data.frameBytes`; all of them when it names none). */
export declare function unreadableTargets(pending: Map<number, { size?: number }>, error: unknown): number[];

/** Environment variables, as `process.env` holds them. */
export type Env = Record<string, string | undefined>;

/** Throws `NotYourDaemonError` unless the directory of `socketPath` is fit to hold this user's
 * daemon: the rule `compactd serve` applies (the default socket's directory: this user's, mode
 * 0700; another: this user's or root's, not writable by others unless sticky). */
export declare function checkSocketDir(socketPath: string, env?: Env): void;

/** The per-user runtime directory of the default socket, by the daemon's rule:
 * `$COMPACTD_RUNTIME_DIR`, else `/run/user/<uid>` when it is a directory of this user, else
 * `$XDG_RUNTIME_DIR`; `undefined` when none applies. */
export declare function runtimeDir(env?: Env): string | undefined;

/** `compactd serve`'s default socket: `<runtimeDir()>/compactd/compactd.sock`, else `/tmp/compactd-<uid>/compactd.sock`. */
export declare function defaultSocketPath(env?: Env): string;

/** Fires when the daemon withdraws a hook request (`$/cancelRequest`: abort or timeout). */
export interface CancellationToken {
  readonly isCancellationRequested: boolean;
  onCancellationRequested(listener: () => void): { dispose(): void };
}

/** A readable byte stream as `Connection` uses it (a socket, a child's stdout). */
export interface ByteSource {
  on(event: 'data', listener: (chunk: Uint8Array) => void): unknown;
  on(event: 'end' | 'close' | 'error', listener: (...args: unknown[]) => void): unknown;
}

/** A writable byte stream as `Connection` uses it (a socket, a child's stdin). */
export interface ByteSink {
  write(chunk: Uint8Array): unknown;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
}

/** One JSON-RPC connection in LSP (`Content-Length`) framing. */
export declare class Connection {
  constructor(readable: ByteSource, writable: ByteSink);
  readonly closed: boolean;
  /** Who answers, named when a call gets no answer in time. */
  peer: { socket?: string; pid?: number | (() => number | undefined) };
  onNotification(method: string, handler: (params: any) => void): void;
  onRequest(method: string, handler: (params: any, token: CancellationToken) => unknown): void;
  onClose(handler: () => void): void;
  listen(): void;
  sendRequest(method: string, params?: unknown, timeoutMs?: number | null): Promise<any>;
  sendNotification(method: string, params?: unknown): Promise<void>;
  dispose(): void;
}

/** The spawned `compactd stdio` process (a Node.js ChildProcess). */
export interface DaemonProcess {
  readonly pid?: number | undefined;
  readonly exitCode: number | null;
  kill(signal?: string): boolean;
}

/** One event from `events()`. */
export interface CompactdEvent {
  name: EventName | 'session_compact' | 'session_compact_failed';
  params: any;
}

export type HookHandler<P, R> = (params: P, token: CancellationToken) => R | Promise<R>;

export interface SpawnOptions {
  bin?: string;
  args?: string[];
  env?: Env;
  cwd?: string;
  /** `'log'` (default): the daemon's stderr lines (only real errors) go to `log`. */
  stderr?: 'log' | 'inherit' | 'ignore';
  /** Where the daemon's stderr lines go (default: `console.error`). */
  log?: (line: string) => void;
}

export interface ConnectOrStartOptions {
  /** Default: `defaultSocketPath(env)`. */
  socketPath?: string;
  /** Default: `$COMPACTD_BIN`, else `compactd` on PATH. */
  bin?: string;
  env?: Env;
}

/** What a hook's handler may answer (`null`/`undefined`: no opinion). */
type HookReply<K extends HookName> = HookReplies[K] | null | undefined | void;

/** Connecting, raw requests, events, hooks and teardown; `CompactdClient` (index.d.ts) adds one
 * method per protocol method. The static constructors return the class they are called on. */
export declare class ClientCore {
  constructor(connection: Connection, options?: { onClose?: () => void | Promise<void> });
  readonly connection: Connection;
  /** Set by `spawnStdio`. */
  process?: DaemonProcess;
  exited?: Promise<number | null>;
  /** Set by `connectSocket`. */
  socket?: unknown;
  /** Default wait for a reply, milliseconds (`null`: no limit). */
  timeoutMs: number | null;
  /** Default wait for the methods the daemon runs as tasks, milliseconds (`null`: no limit). */
  taskTimeoutMs: number | null;

  /** Rejects with `CompactdConnectError` when the binary cannot be started. */
  static spawnStdio<T extends ClientCore>(this: new (connection: Connection) => T, options?: SpawnOptions): Promise<T>;
  /** The default socket unless `socketPath`; rejects with `CompactdConnectError` when nothing listens. */
  static connect<T extends ClientCore>(this: new (connection: Connection) => T, socketPath?: string): Promise<T>;
  /** Refuses (`CompactdConnectError`) a socket whose directory or file is not the user's own. */
  static connectSocket<T extends ClientCore>(this: new (connection: Connection) => T, socketPath: string, env?: Env): Promise<T>;
  /** Connects, first starting the daemon in the background when none answers (one daemon shared by agents and editors). */
  static connectOrStart<T extends ClientCore>(this: new (connection: Connection) => T, options?: ConnectOrStartOptions): Promise<T>;

  /** The daemon's log lines as `(level, message)` from now on (asks for `window/logMessage`). */
  forwardDaemonLog(log: (level: 'error' | 'warn' | 'info' | 'debug', message: string) => void): Promise<() => void>;

  /** Any method, raw; rejects with `DaemonNotAnsweringError` past its timeout. */
  request<T = any>(method: string, params?: object, options?: { timeoutMs?: number | null }): Promise<T>;
  notify(method: string, params?: object): Promise<void>;

  /** Listens for an event, notice or notification hook by name, or `close`; returns a remover. */
  on<K extends keyof EventParams>(name: K, cb: (e: EventParams[K]) => void): () => void;
  on(name: 'close', cb: () => void): () => void;
  onCompactionStart(cb: (e: EventParams['compaction_start']) => void): () => void;
  onCompactionEnd(cb: (e: EventParams['compaction_end']) => void): () => void;
  /** The events from now on; ends when the connection closes or the loop is left. */
  events(options?: { names?: string[]; sessionId?: string }): AsyncIterableIterator<CompactdEvent>;
  waitFor<T = any>(name: string, predicate?: (params: T) => boolean, timeoutMs?: number): Promise<T>;

  addHook<K extends HookName>(
    hook: K,
    handler: HookHandler<HookParams[K], HookReply<K>>,
    options?: { sessionId?: string; timeoutMs?: number },
  ): Promise<() => void>;
  /** `session_before_compact`: answer with `null`, `{cancel: true}` or `{compaction: {...}}`. */
  onBeforeCompact(
    handler: HookHandler<HookParams['session_before_compact'], HookReply<'session_before_compact'>>,
    options?: { sessionId?: string; timeoutMs?: number },
  ): Promise<() => void>;
  onBeforeTree(
    handler: HookHandler<HookParams['session_before_tree'], HookReply<'session_before_tree'>>,
    options?: { sessionId?: string; timeoutMs?: number },
  ): Promise<() => void>;

  close(): Promise<void>;
}

export declare function isRpcError(e: unknown, code?: number): e is ResponseError;
