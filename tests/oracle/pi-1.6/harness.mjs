#!/usr/bin/env node
// Pi 1.6.0 compaction oracle (same interface and expected.json schema as the 0.85.0 one; every
// value is computed with Pi 1.6.0's own functions on its session projection; see README.md).
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
// Prints one JSON object (see tests/fixtures/conformance/pi-1.6/README.md for every field).
import { parseArgs } from "node:util";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { compaction as C, sessionManager as S, messages as M, piAi, cutInternals, PI_VERSION, makeDeterministic } from "./pi.mjs";
import { startFakeLlm, fakeModels } from "./fake-llm.mjs";

export const HARNESS_VERSION = "1.6-1";
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


/** message -> source entry id, parallel to projection.messages */
function messageEntryIds(projection) {
	return projection.entries.flatMap((pe) => pe.messages.map(() => pe.sourceEntry.id));
}

/** the context edits Pi 1.6 applies: the latest context_edit per target among the context entries */
function appliedEdits(projection) {
	const latest = new Map();
	for (const pe of projection.entries) if (pe.sourceEntry.type === "context_edit") latest.set(pe.sourceEntry.targetId, pe.sourceEntry);
	const inContext = new Set(projection.entries.map((pe) => pe.sourceEntry.id));
	return [...latest.values()].map((e) => ({
		editId: e.id,
		targetId: e.targetId,
		kind: e.replacement === null ? "omit" : "replace",
		targetInContext: inContext.has(e.targetId),
	}));
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

	const work = fs.mkdtempSync(path.join(os.tmpdir(), "pi16-oracle-"));
	const copy = path.join(work, "session.jsonl");
	fs.copyFileSync(sessionFile, copy);
	try {
		const sm = S.SessionManager.open(copy, work);
		const header = sm.getHeader();
		const pathEntries = sm.getBranch();
		const projection = sm.buildSessionProjection();
		const ctx = { messages: projection.messages, thinkingLevel: projection.thinkingLevel, model: projection.model };
		const contextEntries = sm.buildContextEntries();
		const branchIndex = new Map(pathEntries.map((e, i) => [e.id, i]));

		const out = {
			oracle: { pi: PI_VERSION, node: process.version, harness: HARNESS_VERSION },
			inputs: { contextWindow, settings, customInstructions: customInstructions ?? null, fakeFinish, clockMs: opts.clockMs, apis },
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
		out.context = {
			thinkingLevel: ctx.thinkingLevel,
			model: ctx.model,
			messages: ctx.messages,
			// 1.6: provenance of each message (the compaction entry's id for its systemMessage and summary)
			messageEntryIds: messageEntryIds(projection),
			// 1.6: the replayed system message the next request starts with (pi-ai getCurrentSystemMessage)
			systemMessage: piAi.getCurrentSystemMessage(ctx.messages) ?? null,
			contextEdits: appliedEdits(projection),
		};
		out.messageTokenEstimates = ctx.messages.map((m) => C.estimateTokens(m));
		// 1.6: what Pi feeds shouldCompact and tokensBefore (usage recorded before the latest
		// context_edit/compaction is ignored; then the current system message counts once)
		out.estimate = C.estimateProjectedContextTokens(projection, pathEntries);
		out.estimateUnprojected = C.estimateContextTokens(ctx.messages);
		const lastUsage = C.getLastAssistantUsage(pathEntries);
		out.lastAssistantUsage = lastUsage ?? null;
		out.usageContextTokens = lastUsage ? C.calculateContextTokens(lastUsage) : null;
		out.shouldCompact = C.shouldCompact(out.estimate.tokens, contextWindow, settings);
		out.shouldCompactByWindow = Object.fromEntries(WINDOWS.map((w) => [String(w), C.shouldCompact(out.estimate.tokens, w, settings)]));

		// cut point: Pi 1.6's own findProjectedCutPoint over the boundary prepareCompaction uses
		const pe = projection.entries;
		const projPrev = pe.findIndex((e) => e.sourceEntry.type === "compaction" && e.messages.length > 0);
		const boundaryStart = projPrev >= 0 ? projPrev + 1 : 0;
		const cut = cutInternals.findProjectedCutPoint(pe, boundaryStart, pe.length, settings.keepRecentTokens);
		const toBranch = (pi) => (pi >= 0 && pi < pe.length ? branchIndex.get(pe[pi].sourceEntry.id) : pi < 0 ? -1 : pathEntries.length);
		let prevCompactionIndex = -1;
		if (projPrev >= 0) prevCompactionIndex = branchIndex.get(pe[projPrev].sourceEntry.id);
		out.cutPoint = {
			prevCompactionIndex,
			boundaryStart: boundaryStart < pe.length ? toBranch(boundaryStart) : pathEntries.length,
			boundaryEnd: pathEntries.length,
			firstKeptEntryIndex: toBranch(cut.firstKeptEntryIndex),
			firstKeptEntryId: pe[cut.firstKeptEntryIndex]?.sourceEntry.id ?? null,
			turnStartIndex: cut.turnStartIndex >= 0 ? toBranch(cut.turnStartIndex) : -1,
			turnStartEntryId: cut.turnStartIndex >= 0 ? pe[cut.turnStartIndex].sourceEntry.id : null,
			isSplitTurn: cut.isSplitTurn,
			// 1.6: the same, as indices into session.contextEntryIds (the projection Pi cuts)
			projected: {
				boundaryStart,
				boundaryEnd: pe.length,
				firstKeptEntryIndex: cut.firstKeptEntryIndex,
				turnStartIndex: cut.turnStartIndex,
			},
		};

		const prep = C.prepareCompaction(pathEntries, settings);
		if (!prep) {
			const last = pathEntries[pathEntries.length - 1];
			out.preparation = null;
			out.preparationNullReason = last?.type === "compaction" ? "Already compacted" : "Nothing to compact (session too small)";
			out.serialized = null;
			out.compaction = null;
			return { out, requests: {} };
		}
		if (prep.firstKeptEntryId !== out.cutPoint.firstKeptEntryId || prep.isSplitTurn !== cut.isSplitTurn) {
			throw new Error("oracle: findProjectedCutPoint disagrees with prepareCompaction");
		}
		// entry ids of the prepared messages: the projected entries Pi collected, in order
		const same = (a, b) => a === b || JSON.stringify(a) === JSON.stringify(b);
		const collect = (from, to) => {
			const pairs = [];
			for (let i = from; i < to; i++) {
				if (pe[i].sourceEntry.type === "compaction") continue;
				for (const m of pe[i].messages) if (m.role !== "system") pairs.push({ id: pe[i].sourceEntry.id, m });
			}
			return pairs;
		};
		const sumPairs = collect(boundaryStart, cut.isSplitTurn ? cut.turnStartIndex : cut.firstKeptEntryIndex);
		const prefixPairs = cut.isSplitTurn ? collect(cut.turnStartIndex, cut.firstKeptEntryIndex) : [];
		if (sumPairs.length !== prep.messagesToSummarize.length || prefixPairs.length !== prep.turnPrefixMessages.length ||
			!sumPairs.every((p, i) => same(p.m, prep.messagesToSummarize[i])) || !prefixPairs.every((p, i) => same(p.m, prep.turnPrefixMessages[i]))) {
			throw new Error("oracle: entry-id mapping of prepared messages disagrees with Pi");
		}
		const fileLists = C.computeFileLists(prep.fileOps);
		out.preparation = {
			firstKeptEntryId: prep.firstKeptEntryId,
			isSplitTurn: prep.isSplitTurn,
			tokensBefore: prep.tokensBefore,
			previousSummary: prep.previousSummary ?? null,
			messagesToSummarize: prep.messagesToSummarize.map((m, i) => ({ entryId: sumPairs[i].id, role: m.role })),
			turnPrefixMessages: prep.turnPrefixMessages.map((m, i) => ({ entryId: prefixPairs[i].id, role: m.role })),
			fileOps: { read: [...prep.fileOps.read], written: [...prep.fileOps.written], edited: [...prep.fileOps.edited] },
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
					// Same argument shape AgentSession._runDefaultCompaction uses in 1.6: session
					// thinking level, no stream override, retry disabled here, no routing session id.
					result = await C.compact(prep, models[api], "oracle-fake-key", undefined, customInstructions, undefined,
						ctx.thinkingLevel, undefined, undefined, { enabled: false }, undefined, undefined);
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
			model: { id: models[primary].id, reasoning: models[primary].reasoning, maxTokens: models[primary].maxTokens, contextWindow: models[primary].contextWindow },
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
			// what AgentSession.compact() does next (1.6: the entry gets the current systemMessage)
			sm.appendCompaction(result.summary, result.firstKeptEntryId, result.tokensBefore, result.details, false, result.usage);
			const entry = sm.getLeafEntry();
			const after = sm.buildSessionProjection();
			out.compaction.entry = entry;
			out.compaction.estimatedTokensAfter = after.messages.reduce((s, m) => s + C.estimateTokens(m), 0);
			out.compaction.contextEntryIdsAfter = sm.buildContextEntries().map((e) => e.id);
			out.compaction.contextAfter = {
				thinkingLevel: after.thinkingLevel,
				model: after.model,
				messages: after.messages,
				messageEntryIds: messageEntryIds(after),
				systemMessage: piAi.getCurrentSystemMessage(after.messages) ?? null,
			};
			out.compaction.nextContextLlm = M.convertToLlm(after.messages);
			out.compaction.estimateAfter = C.estimateProjectedContextTokens(after, sm.getBranch());
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
