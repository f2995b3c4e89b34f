#!/usr/bin/env node
// Pi 0.85.0 compaction oracle.
//
// usage: node harness.mjs SESSION.jsonl [options]
//   --context-window N        model context window for shouldCompact (default 200000)
//   --reserve-tokens N        compaction.reserveTokens (default: Pi's 16384)
//   --keep-recent-tokens N    compaction.keepRecentTokens (default: Pi's 20000)
//   --custom-instructions T   passed to compact() ("Additional focus: ...")
//   --fake-finish stop|length fake LLM finish reason (length -> Pi rejects the summary)
//   --apis LIST               comma list of fake-LLM protocols to run compact() against,
//                             first one is appended to the session
//                             (default "openai-completions,anthropic-messages")
//   --no-compact              skip the compact() run
//   --clock MS                fixed clock for Pi (default: last entry timestamp + 60s)
//   --id-prefix HEX           prefix of deterministic entry ids Pi generates (default "c0")
//   --out FILE                write the result JSON there instead of stdout
//   --requests-out FILE       write captured LLM requests there
//   --write-session FILE      write the session file as Pi left it after appendCompaction
//   --pretty                  indent JSON output
// Prints one JSON object (see tests/fixtures/conformance/pi-0.85/README.md for every field).
import { parseArgs } from "node:util";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { compaction as C, sessionManager as S, messages as M, PI_VERSION, makeDeterministic } from "./pi.mjs";
import { startFakeLlm, fakeModels } from "./fake-llm.mjs";

export const HARNESS_VERSION = 1;
export const WINDOWS = [8192, 32000, 128000, 200000, 272000, 400000, 1000000];

function lastTimestampMs(file) {
	// Pi's own parsing is used for everything that matters; this only picks a clock value.
	const text = fs.readFileSync(file, "utf8");
	let last = 0;
	for (const line of text.split("\n")) {
		if (!line.trim()) continue;
		try {
			const e = JSON.parse(line);
			const t = Date.parse(e.timestamp);
			if (Number.isFinite(t) && t > last) last = t;
		} catch {}
	}
	return (last || Date.parse("2026-01-01T00:00:00.000Z")) + 60_000;
}

/** entry ids of the entries whose context message prepareCompaction collects, in order */
function collectedEntryIds(pathEntries, from, to) {
	const ids = [];
	for (let i = from; i < to; i++) {
		const e = pathEntries[i];
		if (e.type === "compaction") continue;
		if (S.sessionEntryToContextMessages(e).length > 0) ids.push(e.id);
	}
	return ids;
}

export async function runOracle(sessionFile, opts = {}) {
	const contextWindow = opts.contextWindow ?? 200000;
	const settings = {
		...C.DEFAULT_COMPACTION_SETTINGS,
		...(opts.reserveTokens != null ? { reserveTokens: opts.reserveTokens } : {}),
		...(opts.keepRecentTokens != null ? { keepRecentTokens: opts.keepRecentTokens } : {}),
	};
	const apis = opts.apis ?? ["openai-completions", "anthropic-messages"];
	const fakeFinish = opts.fakeFinish ?? "stop";
	const customInstructions = opts.customInstructions ?? undefined;

	// Work on a copy: Pi's SessionManager may repair (append "\n"), migrate (rewrite) and
	// append to the file it opens.
	const work = fs.mkdtempSync(path.join(os.tmpdir(), "pi-oracle-"));
	const copy = path.join(work, "session.jsonl");
	fs.copyFileSync(sessionFile, copy);
	try {
		const sm = S.SessionManager.open(copy, work);
		const header = sm.getHeader();
		const pathEntries = sm.getBranch();
		const ctx = sm.buildSessionContext();
		const contextEntries = sm.buildContextEntries();

		const out = {
			oracle: { pi: PI_VERSION, node: process.version, harness: HARNESS_VERSION },
			inputs: {
				contextWindow,
				settings,
				customInstructions: customInstructions ?? null,
				fakeFinish,
				clockMs: opts.clockMs,
				apis,
			},
		};
		out.session = {
			id: header?.id ?? null,
			version: header?.version ?? null,
			cwd: header?.cwd ?? null,
			entryCount: sm.getEntries().length,
			leafId: sm.getLeafId(),
			branchEntryIds: pathEntries.map((e) => e.id),
			contextEntryIds: contextEntries.map((e) => e.id),
		};
		out.context = { thinkingLevel: ctx.thinkingLevel, model: ctx.model, messages: ctx.messages };
		out.messageTokenEstimates = ctx.messages.map((m) => C.estimateTokens(m));
		out.estimate = C.estimateContextTokens(ctx.messages);
		const lastUsage = C.getLastAssistantUsage(pathEntries);
		out.lastAssistantUsage = lastUsage ?? null;
		out.usageContextTokens = lastUsage ? C.calculateContextTokens(lastUsage) : null;
		out.shouldCompact = C.shouldCompact(out.estimate.tokens, contextWindow, settings);
		out.shouldCompactByWindow = Object.fromEntries(
			WINDOWS.map((w) => [String(w), C.shouldCompact(out.estimate.tokens, w, settings)]),
		);

		// cut point over the same boundaries prepareCompaction uses
		let prevCompactionIndex = -1;
		for (let i = pathEntries.length - 1; i >= 0; i--) {
			if (pathEntries[i].type === "compaction") {
				prevCompactionIndex = i;
				break;
			}
		}
		let boundaryStart = 0;
		if (prevCompactionIndex >= 0) {
			const prev = pathEntries[prevCompactionIndex];
			const k = pathEntries.findIndex((e) => e.id === prev.firstKeptEntryId);
			boundaryStart = k >= 0 ? k : prevCompactionIndex + 1;
		}
		const cut = C.findCutPoint(pathEntries, boundaryStart, pathEntries.length, settings.keepRecentTokens);
		out.cutPoint = {
			prevCompactionIndex,
			boundaryStart,
			boundaryEnd: pathEntries.length,
			firstKeptEntryIndex: cut.firstKeptEntryIndex,
			firstKeptEntryId: pathEntries[cut.firstKeptEntryIndex]?.id ?? null,
			turnStartIndex: cut.turnStartIndex,
			turnStartEntryId: cut.turnStartIndex >= 0 ? pathEntries[cut.turnStartIndex].id : null,
			isSplitTurn: cut.isSplitTurn,
		};

		const prep = C.prepareCompaction(pathEntries, settings);
		if (!prep) {
			const last = pathEntries[pathEntries.length - 1];
			out.preparation = null;
			// the message AgentSession.compact() (manual /compact) would throw
			out.preparationNullReason = last?.type === "compaction" ? "Already compacted" : "Nothing to compact (session too small)";
			out.serialized = null;
			out.compaction = null;
			return { out, requests: {} };
		}
		const historyEnd = prep.isSplitTurn ? cut.turnStartIndex : cut.firstKeptEntryIndex;
		const sumIds = collectedEntryIds(pathEntries, boundaryStart, historyEnd);
		const prefixIds = prep.isSplitTurn ? collectedEntryIds(pathEntries, cut.turnStartIndex, cut.firstKeptEntryIndex) : [];
		if (sumIds.length !== prep.messagesToSummarize.length || prefixIds.length !== prep.turnPrefixMessages.length) {
			throw new Error("oracle: entry-id mapping of prepared messages disagrees with Pi");
		}
		const fileLists = C.computeFileLists(prep.fileOps);
		out.preparation = {
			firstKeptEntryId: prep.firstKeptEntryId,
			isSplitTurn: prep.isSplitTurn,
			tokensBefore: prep.tokensBefore,
			previousSummary: prep.previousSummary ?? null,
			messagesToSummarize: prep.messagesToSummarize.map((m, i) => ({ entryId: sumIds[i], role: m.role })),
			turnPrefixMessages: prep.turnPrefixMessages.map((m, i) => ({ entryId: prefixIds[i], role: m.role })),
			fileOps: {
				read: [...prep.fileOps.read],
				written: [...prep.fileOps.written],
				edited: [...prep.fileOps.edited],
			},
			fileLists,
			formattedFileOperations: C.formatFileOperations(fileLists.readFiles, fileLists.modifiedFiles),
			settings: prep.settings,
		};
		out.serialized = {
			messagesToSummarize: C.serializeConversation(M.convertToLlm(prep.messagesToSummarize)),
			turnPrefixMessages: prep.isSplitTurn ? C.serializeConversation(M.convertToLlm(prep.turnPrefixMessages)) : null,
		};

		if (opts.noCompact) {
			out.compaction = null;
			return { out, requests: {} };
		}

		// ---- full compact() against the fake LLM ----
		const fake = await startFakeLlm();
		const models = fakeModels(fake.port);
		const requests = {};
		const results = {};
		try {
			fake.state.finish = fakeFinish;
			fake.state.replies = {
				history: `SUMMARY-OF-${prep.messagesToSummarize.length}-MESSAGES`,
				turnPrefix: `TURN-PREFIX-SUMMARY-OF-${prep.turnPrefixMessages.length}-MESSAGES`,
			};
			for (const api of apis) {
				fake.state.requests = [];
				let result = null;
				let error = null;
				try {
					// Same argument shape AgentSession._runDefaultCompaction uses: session thinking
					// level, no stream function override, no routing session id.
					result = await C.compact(
						prep,
						models[api],
						"oracle-fake-key",
						undefined,
						customInstructions,
						undefined,
						ctx.thinkingLevel,
						undefined,
						undefined,
						{ enabled: false },
						undefined,
						undefined,
					);
				} catch (e) {
					error = e instanceof Error ? e.message : String(e);
				}
				requests[api] = fake.state.requests;
				results[api] = { result, error };
			}
		} finally {
			await fake.close();
		}

		const primary = apis[0];
		const { result, error } = results[primary];
		out.compaction = {
			api: primary,
			model: { id: models[primary].id, reasoning: models[primary].reasoning, maxTokens: models[primary].maxTokens },
			requestCount: requests[primary].length,
			requestKinds: requests[primary].map((r) => r.kind),
			error,
			result,
			otherApis: Object.fromEntries(
				apis.slice(1).map((a) => [
					a,
					{
						error: results[a].error,
						summary: results[a].result?.summary ?? null,
						sameSummaryAsPrimary: (results[a].result?.summary ?? null) === (result?.summary ?? null),
						usage: results[a].result?.usage ?? null,
					},
				]),
			),
		};
		if (result) {
			// what AgentSession.compact() does next
			sm.appendCompaction(result.summary, result.firstKeptEntryId, result.tokensBefore, result.details, false, result.usage);
			const entry = sm.getLeafEntry();
			const after = sm.buildSessionContext();
			out.compaction.entry = entry;
			out.compaction.estimatedTokensAfter = after.messages.reduce((s, m) => s + C.estimateTokens(m), 0);
			out.compaction.contextEntryIdsAfter = sm.buildContextEntries().map((e) => e.id);
			out.compaction.contextAfter = { thinkingLevel: after.thinkingLevel, model: after.model, messages: after.messages };
			out.compaction.nextContextLlm = M.convertToLlm(after.messages);
			out.compaction.estimateAfter = C.estimateContextTokens(after.messages);
			out.compaction.shouldCompactAfter = C.shouldCompact(out.compaction.estimateAfter.tokens, contextWindow, settings);
			out.compaction.prepareAfterIsNull = C.prepareCompaction(sm.getBranch(), settings) === undefined;
			if (opts.writeSession) fs.copyFileSync(copy, opts.writeSession);
		}
		return { out, requests };
	} finally {
		fs.rmSync(work, { recursive: true, force: true });
	}
}

async function main() {
	const { values, positionals } = parseArgs({
		allowPositionals: true,
		options: {
			"context-window": { type: "string" },
			"reserve-tokens": { type: "string" },
			"keep-recent-tokens": { type: "string" },
			"custom-instructions": { type: "string" },
			"fake-finish": { type: "string" },
			apis: { type: "string" },
			"no-compact": { type: "boolean" },
			clock: { type: "string" },
			"id-prefix": { type: "string" },
			out: { type: "string" },
			"requests-out": { type: "string" },
			"write-session": { type: "string" },
			pretty: { type: "boolean" },
		},
	});
	if (positionals.length !== 1) {
		console.error("usage: node harness.mjs SESSION.jsonl [--context-window N] [--reserve-tokens N] [--keep-recent-tokens N] [--out FILE] ...");
		process.exit(2);
	}
	const file = positionals[0];
	const num = (v) => (v == null ? undefined : Number(v));
	const clockMs = values.clock != null ? Number(values.clock) : lastTimestampMs(file);
	makeDeterministic(clockMs, values["id-prefix"] ?? "c0");
	const { out, requests } = await runOracle(file, {
		contextWindow: num(values["context-window"]),
		reserveTokens: num(values["reserve-tokens"]),
		keepRecentTokens: num(values["keep-recent-tokens"]),
		customInstructions: values["custom-instructions"],
		fakeFinish: values["fake-finish"],
		apis: values.apis ? values.apis.split(",") : undefined,
		noCompact: values["no-compact"],
		clockMs,
		writeSession: values["write-session"],
	});
	const ind = values.pretty ? 1 : undefined;
	const text = `${JSON.stringify(out, null, ind)}\n`;
	if (values.out) fs.writeFileSync(values.out, text);
	else process.stdout.write(text);
	if (values["requests-out"]) fs.writeFileSync(values["requests-out"], `${JSON.stringify(requests, null, ind)}\n`);
}

if (import.meta.url === `file://${process.argv[1]}` || process.argv[1]?.endsWith("harness.mjs")) {
	main().catch((e) => {
		console.error(e?.stack ?? String(e));
		process.exit(1);
	});
}
