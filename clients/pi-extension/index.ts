/**
 * compactd for Pi (0.85.0 and 1.6.0): Pi delegates compaction to the compactd daemon, and Pi's
 * model gets the recall tools `search_history` and `get_entry` over the session's full history.
 *
 * Which Pi: the daemon reproduces Pi 0.85's and Pi 1.6's compaction rules, and a session file
 * cannot tell which Pi wrote it. The extension reads the version of the Pi it runs in and tells
 * the daemon, for each session it opens (`setSettingsOverrides {piVersion}`): "0.85" for Pi
 * 0.85.x, "1.6" for anything newer, so a user of either Pi gets that Pi's rules unconfigured.
 *
 * Why: the daemon brings its summarizer (extractive by default, or a dedicated summarizer model,
 * with secret redaction) to a Pi user without changing their workflow. On
 * `session_before_compact` this extension asks the daemon, over its Unix socket, to compact the
 * same session file with `write: false` (the daemon prepares, summarizes and validates but
 * appends nothing) and returns the result as Pi's custom compaction, so Pi itself appends the
 * entry (`fromHook: true`) exactly as with any extension-supplied summary. The daemon never
 * writes to Pi's file.
 *
 * Speculation (beyond Pi): the extension holds the session in the daemon and, after every turn,
 * has it read Pi's new lines (`syncSession`). With an LLM summarizer the daemon then summarizes
 * in the background once the context passes 75 % of the threshold, and Pi's compaction gets
 * that summary at once instead of waiting for a model.
 *
 * When no daemon answers on the socket the extension starts one (`compactd start`, binary from
 * `$COMPACTD_BIN` or PATH), as editors' `compactd connect` does. When that fails too it returns
 * nothing, so Pi compacts as usual, and says so once per Pi process. Any other refusal (a
 * different branch on disk, a daemon error) also falls back to Pi, with a notification each time.
 *
 * Clearing (beyond Pi): with `compaction.clearToolResults` in the daemon's settings, old tool
 * output is replaced by short texts naming the entry. Only Pi writes its file, so Pi appends
 * each pass the daemon finds due, in the form of the Pi it is: in Pi 0.85 a `compactd.clear`
 * custom entry (which Pi ignores), before each model request, whose `context` event then gets
 * the daemon's projection; in Pi 1.6 Pi's own `context_edit` entries (one per cleared output,
 * the short text as its content), returned from `turn_end`, which Pi appends and applies itself
 * to every later request (and any reader of the file sees the same context), so the extension
 * leaves Pi 1.6's `context` event alone.
 *
 * Recall (beyond Pi): the tools read the daemon's `searchHistory` / `getEntry` for Pi's session
 * file, so after a compaction the model can fetch the exact text a summary condensed. Results
 * are bounded and tagged with entry id, timestamp and role; an unknown id is a tool error.
 *
 * Socket: `$COMPACTD_SOCKET`, else the daemon's default by its own rule
 * (`RUNTIME/compactd/compactd.sock`, RUNTIME being `$COMPACTD_RUNTIME_DIR`, else `/run/user/<uid>`
 * when it exists, else `$XDG_RUNTIME_DIR`; else `/tmp/compactd-<uid>/compactd.sock`). No
 * dependencies: a small NDJSON JSON-RPC client over `node:net` is built in.
 */

import { VERSION as PI_VERSION } from "@earendil-works/pi-coding-agent";
import { execFile } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";

type Json = any;

interface NotifyingContext {
	hasUI?: boolean;
	ui: { notify(message: string, type?: "info" | "warning" | "error"): void };
	sessionManager: { getSessionFile(): string | undefined; getLeafId(): string | null };
	model?: { provider: string; id: string; contextWindow?: number; maxTokens?: number };
}

interface BeforeCompactEvent {
	preparation: { firstKeptEntryId: string; tokensBefore: number; settings?: Json };
	branchEntries: Array<{ id?: string }>;
	customInstructions?: string;
	reason: string;
	signal?: AbortSignal;
}

interface ToolResult {
	content: Array<{ type: "text"; text: string }>;
	details: Json;
}

interface ToolDefinition {
	name: string;
	label: string;
	description: string;
	promptSnippet?: string;
	parameters: Json;
	execute(toolCallId: string, params: Json, signal: AbortSignal | undefined, onUpdate: unknown, ctx: NotifyingContext): Promise<ToolResult>;
}

interface ContextEvent {
	messages: Json[];
}

/** Pi 1.6's `turn_end`: the entries the handlers before this one propose to append. */
interface TurnEndEvent {
	entries?: Json[];
}

interface ExtensionApi {
	on(event: "session_before_compact", handler: (event: BeforeCompactEvent, ctx: NotifyingContext) => Promise<Json>): void;
	on(event: "context", handler: (event: ContextEvent, ctx: NotifyingContext) => Promise<Json>): void;
	appendEntry(customType: string, data?: Json): void;
	on(event: "turn_end", handler: (event: TurnEndEvent, ctx: NotifyingContext) => Promise<Json> | void): void;
	on(event: "session_shutdown", handler: (event: unknown, ctx: NotifyingContext) => void): void;
	registerTool(tool: ToolDefinition): void;
}

/**
 * The compaction rules of the Pi `version` (Pi's own package version): "0.85" for Pi 0.85.x and
 * older, "1.6" for the releases since (0.86 brought the changes 1.6 has: system messages,
 * context edits, the new cut fallback, …).
 */
export function rulesOf(version: string): "0.85" | "1.6" {
	const [major, minor] = version.split(".").map((n) => Number.parseInt(n, 10));
	return major === 0 && (Number.isNaN(minor) || minor <= 85) ? "0.85" : "1.6";
}

/** Why the daemon refused to be told this Pi's rules (an older compactd), until Pi is told. */
let rulesRefused: string | undefined;

/** The socket this extension talks to (see the file comment). */
export function socketPath(env: NodeJS.ProcessEnv = process.env): string {
	if (env.COMPACTD_SOCKET) return env.COMPACTD_SOCKET;
	const uid = typeof process.getuid === "function" ? process.getuid() : 0;
	const runtime = env.COMPACTD_RUNTIME_DIR || standardRuntimeDir(uid) || env.XDG_RUNTIME_DIR;
	if (runtime) return path.join(runtime, "compactd", "compactd.sock");
	return path.join("/tmp", `compactd-${uid}`, "compactd.sock");
}

/** `/run/user/<uid>` when it is a directory of this user (found without `$XDG_RUNTIME_DIR`,
 * which a reduced environment drops). */
function standardRuntimeDir(uid: number): string | undefined {
	const dir = `/run/user/${uid}`;
	try {
		const st = fs.lstatSync(dir);
		return st.isDirectory() && st.uid === uid ? dir : undefined;
	} catch {
		return undefined;
	}
}

class Unreachable extends Error {}

class DaemonError extends Error {
	constructor(
		message: string,
		readonly kind: string | undefined,
	) {
		super(message);
	}
}

/** One NDJSON JSON-RPC connection; requests resolve with the result or reject with DaemonError. */
class Connection {
	closed = false;
	private buffer = "";
	private nextId = 1;
	private pending = new Map<number, { resolve(v: Json): void; reject(e: Error): void }>();

	private constructor(private socket: net.Socket) {
		socket.setEncoding("utf8");
		socket.on("data", (chunk: string) => this.receive(chunk));
		socket.on("error", () => {});
		socket.on("close", () => {
			this.closed = true;
			for (const p of this.pending.values()) p.reject(new DaemonError("compactd closed the connection", "io"));
			this.pending.clear();
		});
	}

	static open(file: string): Promise<Connection> {
		return new Promise((resolve, reject) => {
			const socket = net.connect(file);
			socket.once("error", (e: NodeJS.ErrnoException) => reject(new Unreachable(`${file}: ${e.code ?? e.message}`)));
			socket.once("connect", () => {
				socket.removeAllListeners("error");
				resolve(new Connection(socket));
			});
		});
	}

	private receive(chunk: string): void {
		this.buffer += chunk;
		let nl: number;
		while ((nl = this.buffer.indexOf("\n")) >= 0) {
			const line = this.buffer.slice(0, nl).trim();
			this.buffer = this.buffer.slice(nl + 1);
			if (!line) continue;
			let msg: Json;
			try {
				msg = JSON.parse(line);
			} catch {
				continue;
			}
			if (msg.method !== undefined) {
				// A server request (a hook we never registered) gets "no result"; events are ignored.
				if (msg.id !== undefined) this.send({ jsonrpc: "2.0", id: msg.id, result: null });
				continue;
			}
			const p = this.pending.get(msg.id);
			if (!p) continue;
			this.pending.delete(msg.id);
			if (msg.error) p.reject(new DaemonError(msg.error.message, msg.error.data?.kind));
			else p.resolve(msg.result);
		}
	}

	private send(msg: Json): void {
		this.socket.write(`${JSON.stringify(msg)}\n`);
	}

	request(method: string, params: Json): Promise<Json> {
		const id = this.nextId++;
		return new Promise((resolve, reject) => {
			this.pending.set(id, { resolve, reject });
			this.send({ jsonrpc: "2.0", id, method, params });
		});
	}

	close(): void {
		this.socket.end();
	}
}

/**
 * The daemon's view of this Pi session, held for as long as the session runs: one connection
 * and one `openSession` hold, so a speculative compaction the daemon starts after a turn
 * survives until Pi's compaction asks for it. Reopened when the connection drops, when Pi
 * switches to another session file, or when the model changes (the daemon's threshold follows
 * the model's window).
 */
class HeldSession {
	private constructor(
		readonly conn: Connection,
		readonly file: string,
		readonly sessionId: string,
		private modelKey: string,
	) {}

	/** Opens `file` in the daemon over a new connection. */
	static async open(sock: string, file: string, model: Json | undefined): Promise<HeldSession> {
		const conn = await openDaemon(sock);
		try {
			const info = await conn.request("openSession", model ? { path: file, model } : { path: file });
			// This Pi's rules for this session (the daemon's default may be another Pi's). A daemon
			// older than the setting refuses it: it compacts by its own rules, and Pi is told once.
			await conn
				.request("setSettingsOverrides", { sessionId: info.sessionId, piVersion: rulesOf(PI_VERSION) })
				.catch((e) => {
					if (!(e instanceof DaemonError && e.kind === "invalid_params")) throw e;
					rulesRefused ??= e.message;
				});
			return new HeldSession(conn, file, info.sessionId, JSON.stringify(model ?? null));
		} catch (e) {
			conn.close();
			throw e;
		}
	}

	/** Tells the daemon the model Pi uses now, when it changed (no entry is written). */
	async follow(model: Json | undefined): Promise<void> {
		const key = JSON.stringify(model ?? null);
		if (key === this.modelKey || !model) return;
		await this.conn.request("openSession", { path: this.file, model });
		this.modelKey = key;
	}

	/** The daemon reads Pi's new lines (and may start a speculative compaction). */
	sync(): Promise<Json> {
		return this.conn.request("syncSession", { sessionId: this.sessionId });
	}

	close(): void {
		this.conn.close();
	}
}

/** The model Pi uses, as the daemon's `openSession` takes it (undefined when incomplete). */
function modelOf(ctx: NotifyingContext): Json | undefined {
	const m = ctx.model;
	return m && typeof m.contextWindow === "number" && typeof m.maxTokens === "number"
		? { provider: m.provider, id: m.id, contextWindow: m.contextWindow, maxTokens: m.maxTokens }
		: undefined;
}

/** The held session of one Pi session (each extension instance has its own). */
class Holder {
	/** A promise, so concurrent callers share one open. */
	private held: Promise<HeldSession> | undefined;

	/** The held session for Pi's current file, opened (or reopened) as needed. */
	async session(ctx: NotifyingContext, sock: string): Promise<HeldSession> {
		const file = ctx.sessionManager.getSessionFile();
		if (!file) throw new DaemonError("the session is not saved to a file", undefined);
		let current = this.held && (await this.held.catch(() => undefined));
		if (current && (current.file !== file || current.conn.closed)) {
			current.close();
			current = undefined;
		}
		if (!current) {
			this.held = HeldSession.open(sock, file, modelOf(ctx));
			current = await this.held.catch((e) => {
				this.held = undefined;
				throw e;
			});
		}
		await current.follow(modelOf(ctx));
		return current;
	}

	/**
	 * After every turn: the daemon reads the lines Pi just wrote, and starts a speculative
	 * compaction once the context passes `compaction.speculativeAt` of the threshold, so Pi's
	 * compaction finds the summary ready. Never delays the agent (not awaited) and never
	 * notifies: an unreachable daemon is reported when a compaction needs it.
	 */
	afterTurn(ctx: NotifyingContext, sock: string): void {
		if (!ctx.sessionManager.getSessionFile()) return;
		this.session(ctx, sock)
			.then((s) => s.sync())
			.catch(() => {});
	}

	/**
	 * The clearing pass due now, once the daemon has read Pi's new lines (beyond Pi,
	 * `compaction.clearToolResults`): the held session and the daemon's `clearing` preview
	 * (`due`, `entryIds`, under Pi 1.6 `edits`), or undefined with clearing off.
	 */
	private async clearingDue(ctx: NotifyingContext, sock: string): Promise<{ s: HeldSession; pass: Json } | undefined> {
		if (!ctx.sessionManager.getSessionFile()) return undefined;
		const s = await this.session(ctx, sock);
		const { conn, sessionId } = s;
		const settings = await conn.request("getSettings", { sessionId });
		if (!settings?.compaction?.clearToolResults) return undefined;
		await s.sync();
		const preview = await conn.request("previewCompaction", { sessionId });
		return { s, pass: preview?.clearing };
	}

	/**
	 * At the end of each turn in Pi 1.6 (Pi has written the turn's messages): the daemon reads
	 * them (as `afterTurn`), and a clearing pass it finds due is returned as Pi's own
	 * `context_edit` drafts, after those earlier handlers proposed. Pi appends them to its file
	 * and applies them to every later request; the next turn's sync tells the daemon.
	 */
	async boundary(event: TurnEndEvent, ctx: NotifyingContext, sock: string): Promise<Json> {
		const due = await this.clearingDue(ctx, sock);
		if (!due) {
			this.afterTurn(ctx, sock);
			return undefined;
		}
		const edits = due.pass?.due ? due.pass.edits : undefined;
		if (!Array.isArray(edits) || edits.length === 0) return undefined;
		return { entries: [...(event.entries ?? []), ...edits] };
	}

	/**
	 * Before each of Pi 0.85's model requests (beyond Pi, `compaction.clearToolResults`): the
	 * same projection as the daemon's `getContext`. The daemon reads Pi's new lines; when it
	 * says a clearing pass is due, Pi itself appends the pass (`compactd.clear`, a custom entry
	 * Pi 0.85 ignores), since only Pi writes its file; then every tool result the daemon's
	 * projection cleared is replaced by the daemon's short text, so Pi's provider request
	 * carries it. With clearing off, or the daemon unreachable, the messages go out unchanged.
	 * (Pi 1.6 gets the pass as its own edits from `boundary` and projects it itself.)
	 */
	async project(event: ContextEvent, ctx: NotifyingContext, sock: string, pi: ExtensionApi): Promise<Json> {
		const due = await this.clearingDue(ctx, sock);
		if (!due) return undefined;
		const { s, pass } = due;
		const { conn, sessionId } = s;
		if (pass?.due) {
			pi.appendEntry("compactd.clear", { entryIds: pass.entryIds, tokensFreed: pass.tokensFreed });
			await s.sync();
		}
		const { messages } = await conn.request("getContext", { sessionId });
		const projected = new Map<string, Json>();
		for (const m of messages) if (m.role === "toolResult" && typeof m.toolCallId === "string") projected.set(m.toolCallId, m);
		let changed = false;
		const out = event.messages.map((m) => {
			const p = m?.role === "toolResult" ? projected.get(m.toolCallId) : undefined;
			if (!p || JSON.stringify(p.content) === JSON.stringify(m.content)) return m;
			changed = true;
			const { details: _details, ...rest } = m;
			return { ...rest, content: p.content };
		});
		return changed ? { messages: out } : undefined;
	}

	close(): void {
		const h = this.held;
		this.held = undefined;
		h?.then((s) => s.close()).catch(() => {});
	}
}

/** Runs `compactd start --socket <sock>`: starts the daemon unless one answers there. */
function startDaemon(sock: string, env: NodeJS.ProcessEnv = process.env): Promise<void> {
	const bin = env.COMPACTD_BIN || "compactd";
	return new Promise((resolve, reject) => {
		execFile(bin, ["start", "--socket", sock], { env, timeout: 60000 }, (err, _stdout, stderr) => {
			if (!err) return resolve();
			const code = (err as NodeJS.ErrnoException).code;
			const why = code === "ENOENT" ? `no compactd binary (${bin}; set COMPACTD_BIN or put compactd on PATH)` : String(stderr).trim() || err.message;
			reject(new Unreachable(`${sock}: ${why}`));
		});
	});
}

/** A connection to the daemon on `sock`, starting the daemon first when none answers. */
async function openDaemon(sock: string): Promise<Connection> {
	try {
		return await Connection.open(sock);
	} catch (e) {
		if (!(e instanceof Unreachable)) throw e;
		await startDaemon(sock);
		return Connection.open(sock);
	}
}

/** Asks the daemon for the compaction Pi is about to make; throws Unreachable or DaemonError. */
async function compactWithDaemon(event: BeforeCompactEvent, ctx: NotifyingContext, sock: string, holder: Holder): Promise<Json> {
	const session = await holder.session(ctx, sock);
	const { conn, sessionId } = session;
	let overridden = false;
	const abort = () => {
		conn.request("abortCompaction", { sessionId }).catch(() => {});
	};
	event.signal?.addEventListener("abort", abort, { once: true });
	try {
		// The daemon reads the file; Pi's leaf must be its last entry, or the branches differ.
		const synced = await session.sync();
		if (synced.leafId !== ctx.sessionManager.getLeafId()) {
			throw new DaemonError(`the file's last entry (${synced.leafId}) is not Pi's current leaf`, "leaf_moved");
		}
		// Pi's settings decide the cut. The daemon reads the same files, so they normally agree;
		// when they do not (an override of Pi's), the daemon is told Pi's for this compaction.
		const wanted = event.preparation.settings;
		if (wanted) {
			const have = (await conn.request("getSettings", { sessionId })).compaction;
			const same = ["enabled", "reserveTokens", "keepRecentTokens"].every((k) => have?.[k] === wanted[k]);
			if (!same) {
				await conn.request("setSettingsOverrides", { sessionId, compaction: wanted });
				overridden = true;
			}
		}
		// Without instructions a speculative summary the daemon made after an earlier turn is
		// returned at once (beyond Pi).
		const params: Json = { sessionId, write: false };
		if (event.customInstructions) params.customInstructions = event.customInstructions;
		const result = await conn.request("compact", params);
		const onBranch = event.branchEntries.some((e) => e.id === result.firstKeptEntryId);
		if (!onBranch) throw new DaemonError(`firstKeptEntryId ${result.firstKeptEntryId} is not on Pi's branch`, "leaf_moved");
		const compaction: Json = {
			summary: result.summary,
			firstKeptEntryId: result.firstKeptEntryId,
			tokensBefore: result.tokensBefore,
			details: result.details,
		};
		if (result.usage) compaction.usage = result.usage;
		return { compaction };
	} finally {
		event.signal?.removeEventListener("abort", abort);
		if (overridden) await conn.request("setSettingsOverrides", { sessionId, compaction: null }).catch(() => {});
	}
}

/** Most hits `search_history` returns, and an entry's text `get_entry` returns at most. */
const MAX_HITS = 50;
const DEFAULT_HITS = 10;
const MAX_ENTRY_CHARS = 20000;

/** Keys whose strings are bookkeeping, not text (as the daemon's search skips them). */
const SKIPPED_KEYS = new Set(["type", "role", "id", "parentId", "timestamp", "toolCallId", "api", "provider", "model", "modelId", "stopReason", "signature", "thinkingSignature", "firstKeptEntryId", "targetId"]);

/** An entry's text: its string values (message text, tool calls and results, summaries), one per line. */
export function entryText(v: Json): string {
	const out: string[] = [];
	const walk = (x: Json): void => {
		if (typeof x === "string") out.push(x);
		else if (Array.isArray(x)) x.forEach(walk);
		else if (x && typeof x === "object") for (const [k, y] of Object.entries(x)) if (!SKIPPED_KEYS.has(k)) walk(y);
	};
	walk(v);
	return out.join("\n");
}

/** The message's role, else the entry's type. */
function entryRole(e: Json): string {
	return e?.type === "message" && typeof e.message?.role === "string" ? e.message.role : String(e?.type ?? "unknown");
}

/** Runs `method` on Pi's session file in the daemon: opens it, calls, releases. */
async function onSession(ctx: NotifyingContext, method: string, params: Json): Promise<Json> {
	const file = ctx.sessionManager.getSessionFile();
	if (!file) throw new Error("this Pi session is not saved to a file, so it has no history to recall");
	const conn = await openDaemon(socketPath());
	let sessionId: string | undefined;
	try {
		sessionId = (await conn.request("openSession", { path: file })).sessionId;
		return await conn.request(method, { ...params, sessionId });
	} finally {
		if (sessionId) await conn.request("closeSession", { sessionId }).catch(() => {});
		conn.close();
	}
}

/** `search_history` and `get_entry` for Pi's model, backed by the daemon. */
function registerRecallTools(pi: ExtensionApi): void {
	pi.registerTool({
		name: "search_history",
		label: "Search history",
		description:
			"Search this session's whole history, including the parts an earlier compaction replaced with a summary. Returns the most recent matching entries first, each with its entry id, timestamp and role and a short snippet around the match; read one in full with get_entry.",
		promptSnippet: "search_history: find text in the full session history, including compacted parts",
		parameters: {
			type: "object",
			properties: {
				query: { type: "string", description: "Text to find (case-insensitive) in any message, tool call, tool result or summary." },
				limit: { type: "integer", minimum: 1, maximum: MAX_HITS, description: `Most hits to return, most recent first (default ${DEFAULT_HITS}, at most ${MAX_HITS}).` },
			},
			required: ["query"],
			additionalProperties: false,
		},
		async execute(_id, params, _signal, _onUpdate, ctx) {
			const limit = Math.min(Math.max(Number(params.limit ?? DEFAULT_HITS) || DEFAULT_HITS, 1), MAX_HITS);
			const found: Json[] = await onSession(ctx, "searchHistory", { query: String(params.query), limit: limit + 1 });
			const more = found.length > limit;
			const hits = found.slice(0, limit).filter((h) => h.entryId);
			const lines = hits.map((h) => `[${h.entryId}] ${h.timestamp ?? "?"} ${h.role}${h.compacted ? " (compacted)" : ""}${h.onBranch ? "" : " (other branch)"}: ${h.snippet}`);
			const text = hits.length === 0 ? `No entry matches "${params.query}".` : lines.join("\n") + (more ? `\n(more matches: raise limit or narrow the query)` : "");
			return { content: [{ type: "text", text }], details: { hits, more } };
		},
	});
	pi.registerTool({
		name: "get_entry",
		label: "Get history entry",
		description:
			"Return the full original text of one history entry by its id (from search_history, or from the id range a compaction summary names), with its timestamp and role. Long entries are cut at 20000 characters.",
		promptSnippet: "get_entry: read one history entry verbatim by id",
		parameters: {
			type: "object",
			properties: { entryId: { type: "string", description: "The entry's id, from a search_history hit or a summary's id range." } },
			required: ["entryId"],
			additionalProperties: false,
		},
		async execute(_id, params, _signal, _onUpdate, ctx) {
			let entry: Json;
			try {
				entry = await onSession(ctx, "getEntry", { entryId: String(params.entryId) });
			} catch (e) {
				if (e instanceof DaemonError && e.kind === "entry_not_found") {
					throw new Error(`${e.message}: no entry with this id in the session; ids come from search_history hits or a summary's id range`);
				}
				throw e;
			}
			const full = entryText(entry);
			const chars = [...full];
			const truncated = chars.length > MAX_ENTRY_CHARS;
			const body = truncated ? chars.slice(0, MAX_ENTRY_CHARS).join("") : full;
			const head = `[${entry.id}] ${entry.timestamp ?? "?"} ${entryRole(entry)} (${entry.type})`;
			const tail = truncated ? `\n(cut at ${MAX_ENTRY_CHARS} of ${chars.length} characters)` : "";
			return {
				content: [{ type: "text", text: `${head}\n${body}${tail}` }],
				details: { entryId: entry.id, timestamp: entry.timestamp, role: entryRole(entry), type: entry.type, truncated, totalChars: chars.length },
			};
		},
	});
}

export default function compactd(pi: ExtensionApi): void {
	registerRecallTools(pi);
	let toldUnreachable = false;
	const holder = new Holder();
	pi.on("session_shutdown", () => holder.close());
	if (rulesOf(PI_VERSION) === "1.6") {
		pi.on("turn_end", async (event, ctx) => holder.boundary(event, ctx, socketPath()).catch(() => undefined));
	} else {
		pi.on("turn_end", (_event, ctx) => holder.afterTurn(ctx, socketPath()));
		pi.on("context", async (event, ctx) => holder.project(event, ctx, socketPath(), pi).catch(() => undefined));
	}
	let toldRules = false;
	pi.on("session_before_compact", async (event, ctx) => {
		const sock = socketPath();
		try {
			const compaction = await compactWithDaemon(event, ctx, sock, holder);
			if (rulesRefused && !toldRules) {
				toldRules = true;
				ctx.ui.notify(`compactd does not take this Pi's version (${rulesRefused}); it compacts by its own default rules: update compactd.`, "warning");
			}
			return compaction;
		} catch (e) {
			if (event.signal?.aborted) return { cancel: true };
			if (e instanceof Unreachable) {
				if (!toldUnreachable) {
					toldUnreachable = true;
					ctx.ui.notify(`compactd is not reachable and could not be started (${e.message}); Pi compacts on its own.`, "warning");
				}
				return undefined;
			}
			const kind = e instanceof DaemonError && e.kind ? ` [${e.kind}]` : "";
			ctx.ui.notify(`compactd could not compact${kind}: ${(e as Error).message}; Pi compacts on its own.`, "warning");
			return undefined;
		}
	});
}
