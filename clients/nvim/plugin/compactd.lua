-- Loaded by Neovim at startup: nothing runs until `require("compactd").setup()`, so an installed
-- but unconfigured plugin costs nothing and spawns no daemon.
if vim.g.loaded_compactd then
  return
end
vim.g.loaded_compactd = true
if vim.fn.has('nvim-0.10') == 0 then
  vim.notify_once('compactd.nvim needs Neovim >= 0.10', vim.log.levels.WARN)
end
