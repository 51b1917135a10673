#!lua flags=allow-oom
-- mark.lua: mark a running record of layout 5 as waited on (store.Store.Watch).
-- KEYS[1] record key.
-- Returns 1 when the record's completion will PUBLISH (a running record of
-- layout 5, now marked, or one of layout 4), 2 for a hash (layouts 1 to 3,
-- whose scripts always PUBLISH), 0 for anything else (absent, completed):
-- the waiter then reads the record again instead of waiting.
-- The mark is the record's last byte, "0" or "1"; SETRANGE keeps the
-- key's expiry. Run after the waiter's subscription is registered: either
-- the mark comes first and the completion, whose SET ... GET returns the
-- marked record, publishes, or the completion comes first and this script
-- sees the completed record.
-- allow-oom: it rewrites one byte of an existing record.
-- It reads the record's first two bytes and its last one, never the whole
-- value: a record completed meanwhile may hold a response of many MiB,
-- which a GET would copy into the script's memory.
local key = KEYS[1]
local s2 = redis.pcall('GETRANGE', key, 0, 1)
if type(s2) == 'table' and s2.err then
  return 2
end
if s2 == '5r' then
  if redis.call('GETRANGE', key, -1, -1) ~= '1' then
    redis.call('SETRANGE', key, redis.call('STRLEN', key) - 1, '1')
  end
  return 1
end
if s2 == '4r' then
  return 1
end
return 0
