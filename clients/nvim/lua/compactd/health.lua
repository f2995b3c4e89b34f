--- `:checkhealth compactd`: is Neovim new enough, is the daemon binary there, which version is it,
--- and does it answer `initialize` — what a user checks first when the plugin does nothing.

local M = {}

--- The health reporter: `vim.health` (0.10: start/ok/…), or before 0.10 its `report_*` names
--- (0.8, 0.9) or the `health` module (0.7), so an old Neovim hears why it is refused.
local function reporter()
  local h = vim.health or require('health')
  return {
    start = h.start or h.report_start,
    ok = h.ok or h.report_ok,
    info = h.info or h.report_info,
    warn = h.warn or h.report_warn,
    error = h.error or h.report_error,
  }
end

function M.check()
  local h = reporter()
  h.start('compactd')
  local version = require('compactd.version')
  local too_old = version.unsupported()
  if too_old then
    h.error(too_old, { version.how_to_get })
    return
  end
  h.ok('Neovim ' .. version.format(vim.version()))
  local compactd = require('compactd')
  local cmd = compactd.cmd()
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    h.error(('compactd binary not found: %s'):format(cmd[1]), {
      'Install it with `cargo install --path .` in the compactd checkout',
      'or point setup({ cmd = { "/path/to/compactd", "connect" } }) or $COMPACTD_BIN at it',
    })
    return
  end
  h.ok('binary: ' .. exe)
  local res = vim.system({ exe, '--version' }, { text = true }):wait(10000)
  local version = vim.trim(res.stdout or '')
  if res.code == 0 and version ~= '' then
    h.ok('version: ' .. version)
  else
    h.warn(('`%s --version` failed (exit %s): %s'):format(exe, tostring(res.code), vim.trim(res.stderr or '')))
  end
  local info, err = compactd.request_sync('initialize', { clientName = 'compactd.nvim' }, 10000)
  if info then
    h.ok(('daemon answers: %s %s, protocol %s, summarizer %s'):format(
      info.serverName, info.version, info.protocolVersion, info.capabilities and info.capabilities.summarizer or '?'))
  else
    h.error('the daemon does not answer initialize: ' .. ((err and err.message) or '?'))
  end
  if cmd[2] == 'connect' then
    h.info('shared daemon: `compactd connect` joins the daemon on its socket or starts one')
  end
  local s = compactd.session()
  if s then
    h.info(('session %s: %s'):format(s.sessionId, s.path))
  else
    h.info('no session open (:CompactdOpen [path])')
  end
end

return M
