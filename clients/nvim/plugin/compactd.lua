-- Loaded by Neovim at startup: nothing runs until `require("compactd").setup()`, so an installed
-- but unconfigured plugin costs nothing and spawns no daemon. On a Neovim older than the plugin
-- supports it says so at once, and its commands answer with the same message
-- (`compactd.version`), instead of failing later inside `vim.lsp.rpc`.
if vim.g.loaded_compactd then
  return
end
vim.g.loaded_compactd = true
local why = require('compactd.version').unsupported()
if why then
  vim.notify(why, vim.log.levels.ERROR)
  require('compactd').refuse(why)
end
