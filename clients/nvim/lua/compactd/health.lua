--- `:checkhealth compactd`: is Neovim new enough, is the daemon binary there, which version is it,
--- and does it answer `initialize` — what a user checks first when the plugin does nothing.

local M = {}

function M.check()
  local h = vim.health
  h.start('compactd')
  if vim.fn.has('nvim-0.10') == 1 then
    h.ok('Neovim ' .. tostring(vim.version()))
  else
    h.error('Neovim >= 0.10 is required, this is ' .. tostring(vim.version()))
  end
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
