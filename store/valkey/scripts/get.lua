#!lua flags=no-writes
-- get.lua: read the whole record (store.Store.Get); read-only (EVALSHA_RO).
-- KEYS[1] record key.
-- Returns nil when absent or past its end, else {now_ms, field1, value1, ...},
-- or {now_ms, "4", record, "e", expiry_ms} for a record of layout 4 (a
-- string; expiry_ms its PEXPIRETIME, -1 = none).
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HGETALL', key)
if rec.err then
  return {string.format('%.0f', now), '4', redis.call('GET', key), 'e',
    string.format('%.0f', redis.call('PEXPIRETIME', key))}
end
if #rec == 0 then
  return false
end
for i = 1, #rec, 2 do
  if rec[i] == 'x' and tonumber(rec[i + 1]) ~= 0 and tonumber(rec[i + 1]) <= now then
    return false
  end
end
table.insert(rec, 1, string.format('%.0f', now))
return rec
