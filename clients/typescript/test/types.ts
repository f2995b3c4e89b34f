// Compile-time check of index.d.ts (`tsc --noEmit -p test`): every method used with its typed
// params and results, so a wrong or missing declaration fails `npm test`. Never executed.
import {
  CompactdClient,
  CompactdConnectError,
  CompactdError,
  defaultSocketPath,
  isRpcError,
  type CompactionResult,
  type EffectiveSettings,
  type InitializeResult,
  type SessionInfo,
  type ShouldCompactResult,
} from 'compactd-client';

export async function everyMethod(): Promise<void> {
  const c: CompactdClient = await CompactdClient.spawnStdio({ bin: 'compactd', stderr: 'ignore' });
  const s: CompactdClient = await CompactdClient.connect(defaultSocketPath());
  const init: InitializeResult = await c.initialize({ clientName: 'types' });
  const summarizer: string = init.capabilities.summarizer;
  const info: SessionInfo = await c.openSession({ path: '/abs/s.jsonl', model: { provider: 'p', id: 'm', contextWindow: 1, maxTokens: 1 } });
  const created: SessionInfo = await c.createSession('/abs', { sessionDir: '/abs/sessions' });
  const sid: string = info.sessionId;
  const closed: boolean = (await c.closeSession(created.sessionId)).closed;
  const all: SessionInfo[] = await c.listSessions();
  const appended: string = (await c.appendMessage(sid, { role: 'user', content: 'hi' }, { expectedLeafId: 'x' })).entryId;
  await c.appendEntry(sid, { type: 'label', targetId: appended, label: 'l' });
  await c.setModel(sid, { provider: 'p', id: 'm', contextWindow: 1, maxTokens: 1 });
  const nav: boolean = (await c.navigateTree(sid, { targetId: null, summarize: true })).cancelled;
  const branch: any[] = await c.getBranch(sid);
  const msgs: any[] = (await c.getContext(sid, { format: 'llm' })).messages;
  const usage = await c.getContextUsage(sid);
  const should: ShouldCompactResult = await c.shouldCompact(null, { contextTokens: 1, contextWindow: 2 });
  const preview = await c.previewCompaction(sid, { detail: 'full' });
  const result: CompactionResult = await c.compact(sid, { customInstructions: 'x', write: false });
  const action: string = (await c.checkCompaction(sid, 'postRun')).action;
  const aborted: boolean = (await c.abortCompaction(sid)).aborted;
  const settings: EffectiveSettings = await c.getSettings(sid);
  await c.setSettingsOverrides(sid, { compaction: { keepRecentTokens: 10 } });
  await c.subscribe(sid, { events: ['compaction_end'] });
  await c.subscribe();
  await c.unsubscribe();
  await c.registerHooks(sid, ['session_compact'], { timeoutMs: 5 });
  await c.registerHooks(null, ['session_compact']);
  const off: () => void = await c.onBeforeCompact(({ preparation }) => ({
    compaction: { summary: 's', firstKeptEntryId: preparation.firstKeptEntryId, tokensBefore: preparation.tokensBefore },
  }));
  c.onCompactionEnd((e) => e.result?.summary);
  for await (const ev of c.events({ sessionId: sid })) if (ev.name === 'compaction_end') break;
  try {
    await c.compact(sid);
  } catch (e) {
    if (e instanceof CompactdError) console.log(e.code, e.kind, e.message);
    if (e instanceof CompactdConnectError) console.log(e.code);
    if (isRpcError(e, -32011)) console.log(e.data);
  }
  void [summarizer, closed, all, nav, branch, msgs, usage, should, preview, result, action, aborted, settings, off, s];
  await c.close();
}
