--- compactd for Neovim (>= 0.10; an older one is refused at once, see `compactd.version`): talks to the shared compactd daemon through `vim.lsp.rpc`
--- (Content-Length framing, the same JSON-RPC 2.0 as every compactd client). It spawns
--- `compactd connect`, which joins the daemon on its socket or starts one (as gopls
--- `-remote=auto` does), so the editor sees the same sessions as the agents that use that daemon:
--- opening a file an agent holds yields the agent's session, and its compactions' events.
---
--- Why a plugin: editors and Neovim agent plugins (codecompanion.nvim, avante.nvim style) can
--- show a session's context usage, preview and run compactions, react to compaction events
--- (`User CompactdCompactionStart` / `CompactdCompactionEnd`, payload as `data`) and delegate
--- their own compaction decisions through `before_compact` hooks, without speaking the protocol.
---
--- Every API function is asynchronous (`cb(err, result)`, `err` = `{code, message, data}`), with
--- a blocking `*_sync` twin for scripts and commands. The connection starts on first use.

local M = {}

local version = require('compactd.version')

local defaults = {
  --- The daemon command (`vim.lsp.rpc.start` runs it). Default: `compactd connect` (binary:
  --- `$COMPACTD_BIN` when set, else PATH), with `--socket` when `socket` is set.
  cmd = nil,
  --- The daemon's socket (default: the daemon's own default, shared with agents).
  socket = nil,
  --- Forward the daemon's log lines (`window/logMessage`) into `vim.lsp.log` at their level.
  log_notifications = false,
  --- Extra environment for the daemon process (e.g. `{ PI_CODING_AGENT_DIR = ... }`).
  cmd_env = nil,
  --- The model announced on `openSession` (needed for usage percent and thresholds).
  model = nil,
  --- Wait of the blocking calls, milliseconds.
  timeout_ms = 120000,
}

local state = {
  config = vim.deepcopy(defaults),
  rpc = nil, ---@type vim.lsp.rpc.PublicClient?
  session = nil, ---@type table? SessionInfo of the current session
  usage = nil, ---@type table? last getContextUsage answer
  compacting = false,
  hooks = { session_before_compact = {}, session_before_tree = {} },
  last_error = nil,
}

local function default_cmd()
  local bin = vim.env.COMPACTD_BIN
  if bin == nil or bin == '' then
    bin = 'compactd'
  end
  local cmd = { bin, 'connect' }
  if state.config.socket then
    vim.list_extend(cmd, { '--socket', vim.fn.expand(state.config.socket) })
  end
  return cmd
end

--- The command the daemon is started with.
function M.cmd()
  return state.config.cmd or default_cmd()
end

local function fire(pattern, data)
  vim.api.nvim_exec_autocmds('User', { pattern = pattern, data = data, modeline = false })
end

--- `window/logMessage` type → the `vim.lsp.log` function of that level.
local log_levels = { 'error', 'warn', 'info', 'debug' }

local function on_notification(method, params)
  if type(params) ~= 'table' then
    return
  end
  if method == 'window/logMessage' then
    local level = log_levels[params.type] or 'info'
    vim.lsp.log[level]('compactd', params.message)
    return
  end
  if state.session and params.sessionId ~= nil and params.sessionId ~= state.session.sessionId then
    return
  end
  if method == 'compaction_start' then
    state.compacting = true
    fire('CompactdCompactionStart', params)
  elseif method == 'compaction_end' then
    state.compacting = false
    if params.result ~= nil then
      -- Right after a compaction Pi does not know the context size until the next reply.
      state.usage = state.usage and vim.tbl_extend('force', state.usage, { tokens = vim.NIL, percent = vim.NIL })
    end
    fire('CompactdCompactionEnd', params)
  end
end

--- Answers a hook request: the handlers' last non-nil result, `vim.NIL` for "no result".
local function on_server_request(method, params)
  local handlers = state.hooks[method]
  if handlers == nil then
    return nil, { code = -32601, message = 'not handled: ' .. tostring(method) }
  end
  local answer = vim.NIL
  for _, h in ipairs(handlers) do
    if h.session_id == nil or h.session_id == (params or {}).sessionId then
      local ok, r = pcall(h.fn, params)
      if not ok then
        return nil, { code = -32603, message = tostring(r) }
      end
      if r ~= nil and r ~= vim.NIL then
        answer = r
        if type(r) == 'table' and r.cancel == true then
          break
        end
      end
    end
  end
  return answer
end

--- The RPC client, started on first use. Returns nil and an error message when the daemon
--- cannot be spawned.
function M.client()
  if state.rpc and not state.rpc.is_closing() then
    return state.rpc
  end
  local too_old = version.unsupported()
  if too_old then
    state.last_error = too_old
    return nil, too_old
  end
  local cmd = M.cmd()
  local ok, rpc = pcall(vim.lsp.rpc.start, cmd, {
    notification = on_notification,
    server_request = on_server_request,
    on_exit = function(code)
      state.rpc = nil
      state.session = nil
      if code ~= 0 then
        state.last_error = ('compactd exited with code %d'):format(code)
      end
    end,
  }, { env = state.config.cmd_env })
  if not ok then
    state.last_error = ('cannot start compactd (%s): %s'):format(table.concat(cmd, ' '), tostring(rpc))
    return nil, state.last_error
  end
  state.rpc = rpc
  if state.config.log_notifications then
    rpc.request('initialize', { clientName = 'compactd.nvim', logNotifications = true }, function() end)
  end
  return rpc
end

--- Sends `method` with `params`; `cb(err, result)` runs on the main loop.
function M.request(method, params, cb)
  cb = cb or function() end
  local rpc, why = M.client()
  if not rpc then
    vim.schedule(function()
      cb({ code = -32603, message = why })
    end)
    return false
  end
  local ok = rpc.request(method, params or vim.empty_dict(), function(err, result)
    cb(err, result)
  end)
  if not ok then
    vim.schedule(function()
      cb({ code = -32603, message = 'compactd connection is closed' })
    end)
  end
  return ok
end

--- Blocking `request`: returns `result, err`.
function M.request_sync(method, params, timeout_ms)
  local done, err, result = false, nil, nil
  M.request(method, params, function(e, r)
    done, err, result = true, e, r
  end)
  local ok = vim.wait(timeout_ms or state.config.timeout_ms, function()
    return done
  end, 10)
  if not ok then
    return nil, { code = -32603, message = ('%s timed out'):format(method) }
  end
  return result, err
end

local function session_id()
  return state.session and state.session.sessionId
end

local function need_session(cb)
  if session_id() then
    return true
  end
  vim.schedule(function()
    cb({ code = -32001, message = 'no compactd session: run :CompactdOpen [path] first' })
  end)
  return false
end

--- Opens `path` (absolute; `~` expanded) as the current session and subscribes to its events.
function M.open(path, cb)
  cb = cb or function() end
  path = vim.fn.fnamemodify(vim.fn.expand(path), ':p')
  local params = { path = path, model = state.config.model }
  M.request('openSession', params, function(err, info)
    if err then
      return cb(err)
    end
    state.session = info
    M.request('subscribe', { sessionId = info.sessionId }, function(serr)
      if serr then
        return cb(serr)
      end
      M.usage(function()
        cb(nil, info)
      end)
    end)
  end)
end

--- `getContextUsage` plus `shouldCompact` of the current session: `{tokens, contextWindow,
--- percent, threshold, shouldCompact}` (the numbers nil when unknown).
function M.usage(cb)
  cb = cb or function() end
  if not need_session(cb) then
    return
  end
  M.request('getContextUsage', { sessionId = session_id() }, function(err, usage)
    if err then
      return cb(err)
    end
    local out = type(usage) == 'table' and vim.deepcopy(usage) or {}
    M.request('shouldCompact', { sessionId = session_id() }, function(serr, should)
      if not serr and type(should) == 'table' then
        out.threshold = should.threshold
        out.shouldCompact = should.shouldCompact
        out.contextWindow = out.contextWindow or should.contextWindow
      end
      state.usage = out
      cb(nil, out)
    end)
  end)
end

function M.preview(cb)
  if need_session(cb) then
    M.request('previewCompaction', { sessionId = session_id(), detail = 'full' }, cb)
  end
end

--- Compacts the current session (`opts.instructions`: custom instructions).
function M.compact(opts, cb)
  opts = opts or {}
  cb = cb or function() end
  if not need_session(cb) then
    return
  end
  local instructions = opts.instructions
  if instructions == '' then
    instructions = nil
  end
  M.request('compact', { sessionId = session_id(), customInstructions = instructions, write = opts.write }, cb)
end

--- Registers `fn(params)` for the daemon's `session_before_compact` hook of the current session
--- (or every session with `opts.all`). `fn` returns nil for "no result" (sent as `vim.NIL`),
--- `{cancel = true}` or `{compaction = {summary, firstKeptEntryId, tokensBefore, details}}`.
function M.on_before_compact(fn, opts, cb)
  opts = opts or {}
  cb = cb or function() end
  local sid = (not opts.all) and session_id() or nil
  table.insert(state.hooks.session_before_compact, { fn = fn, session_id = sid })
  M.request('registerHooks', { hooks = { 'session_before_compact' }, sessionId = sid, timeoutMs = opts.timeout_ms }, cb)
end

--- The current session's info (nil before :CompactdOpen).
function M.session()
  return state.session
end

--- A short statusline component: `compactd 42%`, `compactd …` while compacting, `compactd -`
--- when the size is unknown, '' without a session.
function M.statusline()
  if not state.session then
    return ''
  end
  if state.compacting then
    return 'compactd …'
  end
  local pct = state.usage and state.usage.percent
  if type(pct) ~= 'number' then
    return 'compactd -'
  end
  return ('compactd %d%%'):format(math.floor(pct + 0.5))
end

local function num(v)
  return type(v) == 'number' and v or nil
end

--- The one-line status text of a `usage` answer.
function M.format_status(u)
  if not u or not num(u.contextWindow) then
    return 'compactd: no model for this session (open it with setup({ model = ... }))'
  end
  local threshold = num(u.threshold) and (', compacts above %d'):format(u.threshold) or ''
  if not num(u.tokens) then
    -- Known once the model's next reply reports its usage.
    return ('compactd: context size not known yet (the next reply tells it); window %d tokens%s'):format(
      u.contextWindow,
      threshold
    )
  end
  local pct = num(u.percent) and (' (%.1f%%)'):format(u.percent) or ''
  return ('compactd: %d tokens%s of %d%s'):format(u.tokens, pct, u.contextWindow, threshold)
end

--- The preview as buffer lines.
function M.format_preview(p)
  if p.nothingToCompact then
    return { 'Nothing to compact: ' .. p.nothingToCompact }
  end
  local out = {
    '# compactd preview: ' .. (state.session and state.session.path or ''),
    '',
    ('tokens before: %d'):format(p.tokensBefore or 0),
    ('first kept entry: %s%s'):format(p.firstKeptEntryId, p.isSplitTurn and ' (split turn)' or ''),
    ('summarize: %d messages, ~%d tokens'):format(p.summarize.count, p.summarize.estimatedTokens),
    ('turn prefix: %d messages, ~%d tokens'):format(p.turnPrefix.count, p.turnPrefix.estimatedTokens),
    ('kept: %d messages, ~%d tokens'):format(p.kept.count, p.kept.estimatedTokens),
    ('previous summary: %s'):format(p.hasPreviousSummary and 'yes' or 'no'),
  }
  local files = p.fileLists or {}
  for _, key in ipairs({ 'readFiles', 'modifiedFiles' }) do
    local list = files[key]
    if type(list) == 'table' and #list > 0 then
      table.insert(out, key .. ': ' .. table.concat(list, ', '))
    end
  end
  table.insert(out, '')
  table.insert(out, '## Summarized')
  for _, m in ipairs(p.messagesToSummarize or {}) do
    table.insert(out, ('- %s %s'):format(m.entryId, m.role))
  end
  if p.turnPrefixMessages and #p.turnPrefixMessages > 0 then
    table.insert(out, '')
    table.insert(out, '## Turn prefix')
    for _, m in ipairs(p.turnPrefixMessages) do
      table.insert(out, ('- %s %s'):format(m.entryId, m.role))
    end
  end
  return out
end

local function report(err)
  vim.notify('compactd: ' .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
end

local function scratch(lines)
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'markdown'
  vim.api.nvim_buf_set_name(buf, 'compactd://preview/' .. buf)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  return buf
end

--- The user commands: name, handler, options.
local function command_list()
  return {
    { 'CompactdOpen', function(a)
      local path = a.args ~= '' and a.args or vim.api.nvim_buf_get_name(0)
      M.open(path, function(err, info)
        if err then
          return report(err)
        end
        vim.notify(('compactd: opened %s (%s, %d entries)'):format(info.path, info.sessionId, info.entryCount))
      end)
    end, { nargs = '?', complete = 'file', desc = 'Open a Pi session file in compactd' } },
    { 'CompactdStatus', function()
      M.usage(function(err, u)
        if err then
          return report(err)
        end
        vim.notify(M.format_status(u))
      end)
    end, { desc = 'compactd: context tokens, percent and threshold' } },
    { 'CompactdPreview', function()
      M.preview(function(err, p)
        if err then
          return report(err)
        end
        scratch(M.format_preview(p))
      end)
    end, { desc = 'compactd: what a compaction would summarize and keep' } },
    { 'CompactdCompact', function(a)
      M.compact({ instructions = a.args }, function(err, r)
        if err then
          return report(err)
        end
        vim.notify(('compactd: compacted %d tokens, kept from %s'):format(r.tokensBefore, r.firstKeptEntryId))
      end)
    end, { nargs = '*', desc = 'compactd: compact the session [custom instructions]' } },
  }
end

--- Defines the commands; with `refusal` set (a Neovim too old), each only reports it.
local function commands(refusal)
  for _, c in ipairs(command_list()) do
    local name, handler, opts = c[1], c[2], c[3]
    if refusal then
      handler = function()
        vim.notify(refusal, vim.log.levels.ERROR)
      end
    end
    vim.api.nvim_create_user_command(name, handler, opts)
  end
end

--- On a Neovim too old: the commands exist and answer `why` (the plugin file calls this on load).
function M.refuse(why)
  commands(why)
end

--- `require("compactd").setup({ model = {...}, socket = ..., cmd_env = {...} })`.
function M.setup(opts)
  state.config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
  local too_old = version.unsupported()
  if too_old then
    vim.notify(too_old, vim.log.levels.ERROR)
  end
  commands(too_old)
  return M
end

--- For :checkhealth and tests.
function M._state()
  return state
end

--- The hook dispatcher vim.lsp.rpc calls (exposed for tests).
M._on_server_request = on_server_request

return M
