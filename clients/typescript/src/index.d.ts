// Types for compactd-client (proto-docs/methods.md). The implementation is plain ESM in index.js.
// Self-contained: no Node.js or other package types are needed, so this type-checks in any
// TypeScript project (`tsc --init` defaults, no @types/node).

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

/** The daemon cannot be reached (no binary to spawn, nothing on the socket); `code` is the OS error code. */
export declare class CompactdConnectError extends Error {
  readonly code: string | undefined;
}

/** Environment variables, as `process.env` holds them. */
export type Env = Record<string, string | undefined>;

/** `compactd serve`'s default socket: `$XDG_RUNTIME_DIR/compactd/compactd.sock`, else `$TMPDIR` (or /tmp) `/compactd-<uid>/compactd.sock`. */
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
  onNotification(method: string, handler: (params: any) => void): void;
  onRequest(method: string, handler: (params: any, token: CancellationToken) => unknown): void;
  onClose(handler: () => void): void;
  listen(): void;
  sendRequest(method: string, params?: unknown): Promise<any>;
  sendNotification(method: string, params?: unknown): Promise<void>;
  dispose(): void;
}

/** The spawned `compactd stdio` process (a Node.js ChildProcess). */
export interface DaemonProcess {
  readonly pid?: number | undefined;
  readonly exitCode: number | null;
  kill(signal?: string): boolean;
}

export interface InitializeResult {
  serverName: string;
  version: string;
  protocolVersion: string;
  capabilities: { framings: string[]; hooks: HookName[]; events: EventName[]; summarizer: string };
  /** Beyond Pi: the daemon process (what `compactd status` prints). */
  daemon: {
    pid: number;
    uptimeMs: number;
    connections: number;
    sessions: number;
    socket?: string;
    configFile?: string;
    logFile?: string;
    idleExitSeconds?: number;
  };
}

export interface NavigateTreeResult {
  cancelled: boolean;
  aborted?: boolean;
  editorText?: string;
  summaryEntry?: object;
  [key: string]: unknown;
}

export interface ShouldCompactResult {
  shouldCompact: boolean;
  contextTokens: number;
  contextWindow: number;
  threshold: number;
  settings: { enabled: boolean; reserveTokens: number; keepRecentTokens: number };
}

export interface EffectiveSettings {
  compaction: { enabled: boolean; reserveTokens: number; keepRecentTokens: number };
  branchSummary: { reserveTokens: number };
  retry: { enabled: boolean; maxRetries: number; baseDelayMs: number };
  defaultThinkingLevel: string;
}

/** One event from `events()`. */
export interface CompactdEvent {
  name: EventName | 'session_compact' | 'session_compact_failed';
  params: any;
}

export declare const ErrorCodes: Readonly<{
  ParseError: -32700;
  InvalidRequest: -32600;
  MethodNotFound: -32601;
  InvalidParams: -32602;
  InternalError: -32603;
  UnknownSession: -32001;
  NotFound: -32002;
  InvalidSessionFile: -32003;
  Locked: -32004;
  NothingToCompact: -32010;
  AlreadyCompacted: -32011;
  Cancelled: -32012;
  SummarizationFailed: -32013;
  NoModel: -32014;
  Auth: -32015;
  Compacting: -32020;
  LeafMoved: -32021;
  EntryNotFound: -32022;
  Io: -32030;
  Overloaded: -32040;
  RequestCancelled: -32800;
}>;

export type EventName =
  | 'compaction_start'
  | 'compaction_end'
  | 'compaction_suppressed'
  | 'compaction_undone'
  | 'summary_edited'
  | 'summarization_retry_scheduled'
  | 'summarization_retry_attempt_start'
  | 'summarization_retry_finished'
  | 'subscription_dropped';
export type HookName =
  | 'session_before_compact'
  | 'session_compact'
  | 'session_compact_failed'
  | 'session_before_tree';
export declare const EVENTS: readonly EventName[];
export declare const HOOKS: readonly HookName[];

export interface Model {
  provider: string;
  id: string;
  contextWindow: number;
  maxTokens: number;
  reasoning?: boolean;
}

export interface SessionInfo {
  sessionId: string;
  path: string;
  headerId: string;
  cwd?: string | null;
  leafId: string | null;
  entryCount: number;
  persisted: boolean;
  model?: Model | null;
  thinkingLevel: string;
  isCompacting: boolean;
}

export interface AppendResult {
  entryId: string;
  leafId: string;
}

export type NoticeName = 'window/logMessage';
export declare const NOTICES: readonly NoticeName[];

/** A `window/logMessage` notification: one line of the daemon's log (1 error … 4 debug). */
export interface LogMessage {
  type: 1 | 2 | 3 | 4;
  message: string;
}

export interface ContextUsage {
  tokens: number | null;
  contextWindow: number;
  percent: number | null;
}

export interface CompactionSettingsPatch {
  enabled?: boolean;
  reserveTokens?: number;
  keepRecentTokens?: number;
  /** Beyond Pi: the most paths each summary file block lists. */
  fileListLimit?: number;
  /** Beyond Pi: ineffective automatic compactions in a row before automatic compaction pauses. */
  maxIneffectiveCompactions?: number;
  /** Beyond Pi: speculate at this fraction of the threshold, in (0, 1); 0 turns speculation off. */
  speculativeAt?: number | "auto";
}

/** Beyond Pi: tokens and dollars of one kind of call; `usd` is null when a price is unknown. */
export interface SessionSpend {
  count: number;
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  usd: number | null;
}

/** Beyond Pi: getCostReport's answer. */
export interface CostReport {
  agent: SessionSpend;
  compactions: SessionSpend;
  discardedSpeculations: SessionSpend;
  cacheRewrites: { compactionId: string; tokens: number; cold: boolean; usd: number | null }[];
  compactionUsd: number | null;
}

/** Beyond Pi: a speculative compaction (previewCompaction, listSessions, syncSession). */
export interface SpeculationView {
  state: 'running' | 'ready';
  coversThroughEntryId: string | null;
  firstKeptEntryId: string;
  startedAt: string;
  tokens: number;
  wouldInstall: boolean;
}

export interface CompactionResult {
  summary: string;
  firstKeptEntryId: string;
  tokensBefore: number;
  estimatedTokensAfter?: number;
  usage?: unknown;
  details?: any;
}

export interface CompactionPreview {
  firstKeptEntryId?: string;
  isSplitTurn?: boolean;
  tokensBefore?: number;
  hasPreviousSummary?: boolean;
  summarize?: { count: number; estimatedTokens: number };
  turnPrefix?: { count: number; estimatedTokens: number };
  kept?: { count: number; estimatedTokens: number };
  /** detail "full" only */
  messagesToSummarize?: { entryId: string; role: string }[];
  turnPrefixMessages?: { entryId: string; role: string }[];
  previousSummary?: string | null;
  serialized?: { messagesToSummarize: string; turnPrefixMessages: string | null };
  fileLists?: { readFiles: string[]; modifiedFiles: string[] };
  nothingToCompact?: 'Already compacted' | 'Nothing to compact (session too small)';
  [key: string]: unknown;
}

export interface CheckOutcome {
  action: 'none' | 'compacted' | 'failed' | 'aborted';
  reason?: 'threshold' | 'overflow';
  willRetry: boolean;
  contextChanged: boolean;
  result?: CompactionResult;
  errorMessage?: string;
}

export interface CompactionStartEvent {
  sessionId: string;
  reason: 'manual' | 'threshold' | 'overflow';
}

export interface CompactionEndEvent {
  sessionId: string;
  reason: 'manual' | 'threshold' | 'overflow';
  result?: CompactionResult;
  aborted: boolean;
  willRetry: boolean;
  errorMessage?: string;
}

export interface BeforeCompactParams {
  sessionId: string;
  preparation: {
    firstKeptEntryId: string;
    messagesToSummarize: unknown[];
    turnPrefixMessages: unknown[];
    isSplitTurn: boolean;
    tokensBefore: number;
    previousSummary?: string;
    fileOps: unknown;
    settings: unknown;
    [key: string]: unknown;
  };
  branchEntries: any[];
  customInstructions?: string;
  reason: string;
  willRetry: boolean;
}

export type BeforeCompactReply =
  | null
  | undefined
  | { cancel: true }
  | {
      compaction: {
        summary: string;
        firstKeptEntryId: string;
        tokensBefore: number;
        details?: unknown;
        usage?: unknown;
      };
    };

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

export declare class CompactdClient {
  constructor(connection: Connection, options?: { onClose?: () => void | Promise<void> });
  readonly connection: Connection;
  /** Set by `spawnStdio`. */
  process?: DaemonProcess;
  exited?: Promise<number | null>;
  /** Set by `connectSocket`. */
  socket?: unknown;

  /** Rejects with `CompactdConnectError` when the binary cannot be started. */
  static spawnStdio(options?: SpawnOptions): Promise<CompactdClient>;
  /** The default socket unless `socketPath`; rejects with `CompactdConnectError` when nothing listens. */
  static connect(socketPath?: string): Promise<CompactdClient>;
  static connectSocket(socketPath: string): Promise<CompactdClient>;
  /** Connects, first starting the daemon in the background when none answers (one daemon shared by agents and editors). */
  static connectOrStart(options?: ConnectOrStartOptions): Promise<CompactdClient>;

  /** The daemon's log lines as `(level, message)` from now on (asks for `window/logMessage`). */
  forwardDaemonLog(log: (level: 'error' | 'warn' | 'info' | 'debug', message: string) => void): Promise<() => void>;

  request<T = any>(method: string, params?: object): Promise<T>;
  notify(method: string, params?: object): Promise<void>;

  initialize(params?: { clientName?: string; capabilities?: object; logNotifications?: boolean }): Promise<InitializeResult>;
  /** A session file by `path`, or (postgres backend) a stored session by `headerId`. */
  openSession(params: {
    path?: string;
    headerId?: string;
    create?: boolean;
    cwd?: string;
    model?: Model;
    thinkingLevel?: string;
  }): Promise<SessionInfo>;
  createSession(params: {
    cwd: string;
    sessionDir?: string;
    model?: Model;
    thinkingLevel?: string;
  }): Promise<SessionInfo>;
  closeSession(sessionId: string): Promise<{ closed: boolean }>;
  listSessions(): Promise<SessionInfo[]>;
  /** Beyond Pi (postgres backend): the shared store's sessions, newest first. */
  listStoredSessions(params?: { cwd?: string }): Promise<{
    sessions: { headerId: string; cwd: string; created: number; entryCount: number }[];
  }>;

  appendMessage(sessionId: string, message: object, options?: { expectedLeafId?: string; entryId?: string }): Promise<AppendResult>;
  appendEntry(sessionId: string, entry: object, options?: { expectedLeafId?: string; entryId?: string }): Promise<AppendResult>;
  /** Beyond Pi: also says whether the context already needs a compaction under the new model. */
  setModel(
    sessionId: string,
    model: Model,
  ): Promise<AppendResult & { shouldCompact: boolean; tokens: number; threshold: number }>;
  navigateTree(
    sessionId: string,
    targetId: string | null,
    options?: { summarize?: boolean; customInstructions?: string; replaceInstructions?: boolean; label?: string },
  ): Promise<NavigateTreeResult>;
  getBranch(sessionId: string): Promise<any[]>;
  getContext(sessionId: string, format?: 'agent' | 'llm'): Promise<{ messages: any[]; leafId: string | null }>;

  getContextUsage(sessionId: string): Promise<ContextUsage | null>;
  shouldCompact(params: {
    sessionId?: string;
    contextTokens?: number;
    contextWindow?: number;
    settings?: CompactionSettingsPatch;
  }): Promise<ShouldCompactResult>;
  previewCompaction(sessionId: string, detail?: 'summary' | 'full'): Promise<CompactionPreview>;
  /** `write: false` returns the compaction without appending it (the caller writes it). */
  compact(sessionId: string, options?: { customInstructions?: string; write?: boolean }): Promise<CompactionResult>;
  checkCompaction(sessionId: string, phase: 'prePrompt' | 'midRun' | 'postRun'): Promise<CheckOutcome>;
  abortCompaction(sessionId: string): Promise<{ aborted: boolean }>;

  /** Beyond Pi: every entry, compacted ones included, most recent first. */
  searchHistory(
    sessionId: string,
    query: string,
    options?: { regex?: boolean; limit?: number },
  ): Promise<{ entryId: string | null; role: string; timestamp: unknown; snippet: string; compacted: boolean; onBranch: boolean }[]>;
  /** Beyond Pi: one entry exactly as stored. */
  getEntry(sessionId: string, entryId: string): Promise<any>;
  /** Beyond Pi: the pinned lane. */
  pin(sessionId: string, text: string, label?: string): Promise<{ pinId: string; entryId: string; leafId: string }>;
  unpin(sessionId: string, pinId: string): Promise<AppendResult>;
  listPins(sessionId: string): Promise<{ pinId: string; text: string; label?: string; timestamp: unknown }[]>;
  /** Beyond Pi: undo and edit of the latest compaction. */
  undoCompaction(sessionId: string): Promise<{ undoneCompactionId: string; entryId: string; leafId: string }>;
  editSummary(sessionId: string, summary: string): Promise<{ entry: any; editedFrom: string; entryId: string; leafId: string }>;
  /** Beyond Pi: what the session spent, in tokens and (with prices) US dollars. */
  getCostReport(sessionId: string): Promise<CostReport>;
  /** Beyond Pi: reads lines another writer appended to the session file; may start a speculative compaction. */
  syncSession(sessionId: string): Promise<{ leafId: string | null; entryCount: number; speculation?: SpeculationView }>;
  getSettings(sessionId: string): Promise<EffectiveSettings>;
  setSettingsOverrides(params: { sessionId?: string; compaction?: CompactionSettingsPatch | null }): Promise<{ ok: true }>;

  subscribe(params?: { sessionId?: string; events?: EventName[] }): Promise<{ subscribed: true }>;
  unsubscribe(): Promise<{ unsubscribed: true }>;
  on(name: 'compaction_start', cb: (e: CompactionStartEvent) => void): () => void;
  on(name: 'compaction_end', cb: (e: CompactionEndEvent) => void): () => void;
  on(name: 'window/logMessage', cb: (e: LogMessage) => void): () => void;
  on(name: EventName | 'session_compact' | 'session_compact_failed' | 'close', cb: (e: any) => void): () => void;
  onCompactionStart(cb: (e: CompactionStartEvent) => void): () => void;
  onCompactionEnd(cb: (e: CompactionEndEvent) => void): () => void;
  events(options?: { names?: string[]; sessionId?: string }): AsyncIterableIterator<CompactdEvent>;
  waitFor<T = any>(name: string, predicate?: (params: T) => boolean, timeoutMs?: number): Promise<T>;

  registerHooks(params: { sessionId?: string; hooks: HookName[]; timeoutMs?: number }): Promise<{ registered: true }>;
  addHook(hook: HookName, handler: HookHandler<any, any>, options?: { sessionId?: string; timeoutMs?: number }): Promise<() => void>;
  onBeforeCompact(
    handler: HookHandler<BeforeCompactParams, BeforeCompactReply>,
    options?: { sessionId?: string; timeoutMs?: number },
  ): Promise<() => void>;
  onBeforeTree(handler: HookHandler<any, any>, options?: { sessionId?: string; timeoutMs?: number }): Promise<() => void>;

  close(): Promise<void>;
}

export declare function isRpcError(e: unknown, code?: number): e is ResponseError;
