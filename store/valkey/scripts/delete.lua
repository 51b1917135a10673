#!lua flags=allow-oom
-- delete.lua: remove the record whatever its state (store.Store.Delete, operator purge).
-- KEYS[1] record key. ARGV[1] events channel.
-- Returns 1 when a live record was removed, 0 when there was none.
-- allow-oom: it only deletes, which frees memory on a full server.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.pcall('HGET', key, 'x')
if type(expiry) == 'table' and expiry.err then
  -- Layout 4 (a string): the server's own expiry keeps it current.
  redis.call('DEL', key)
  redis.call('PUBLISH', ARGV[1], key)
  return 1
end
if not expiry then
  return 0
end
redis.call('DEL', key)
if tonumber(expiry) ~= 0 and tonumber(expiry) <= now then
  return 0
end
redis.call('PUBLISH', ARGV[1], key)
return 1
