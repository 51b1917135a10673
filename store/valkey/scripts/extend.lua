#!lua flags=allow-oom
-- extend.lua: move the lease end to now + lease while the record holds the token (store.Store.Extend).
-- KEYS[1] record key. ARGV[1] token, ARGV[2] lease ms (> 0), ARGV[3] "4r"
-- ns(token), the start of a running record of layout 4 the token holds
-- (of layout 5: the same after "5r").
-- Returns 1 when extended, 0 when the token does not hold the record.
-- allow-oom: it only rewrites two numbers of an existing record, so a full
-- server (maxmemory, noeviction) still runs it: the holder's heartbeat keeps
-- its lease while claims are refused, and no other instance takes the claim
-- over when memory frees (adversarial finding F4 of issue 10).
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.pcall('HMGET', key, 's', 't', 'x', 'rt')
if rec.err then
  -- Layout 4 (a string): only its numbers change (docs/protocol.md,
  -- "Layout 4 (Valkey)").
  local v = redis.call('GET', key)
  local five = string.sub(v, 1, 2) == '5r'
  if five then
    -- Layout 5: the same start after "5r", and two more numbers.
    if string.sub(v, 3, #ARGV[3]) ~= string.sub(ARGV[3], 3) then
      return 0
    end
  elseif string.sub(v, 1, #ARGV[3]) ~= ARGV[3] then
    return 0
  end
  local head, rt, age, tk, mark
  if five then
    head, rt, age, tk, mark = string.match(v, '^(.*) (%d+) %d+ (%d+) ([01]) %d+ ([01])$')
  else
    head, rt, age, tk = string.match(v, '^(.*) (%d+) %d+ (%d+) ([01])$')
  end
  local e = redis.call('PEXPIRETIME', key)
  local created = e - tonumber(age)
  local lease_end = now + tonumber(ARGV[2])
  local expiry
  if tonumber(rt) > 0 then
    expiry = math.max(e, lease_end)
  else
    expiry = lease_end + ABANDONED_KEEP_MS
  end
  local tail = string.format(' %s %.0f %.0f %s', rt, expiry - lease_end, expiry - created, tk)
  if five then
    -- Its expiry moves with the key's; a waiter's mark stays.
    tail = tail .. string.format(' %.0f %s', expiry, mark)
  end
  redis.call('SET', key, head .. tail, 'PXAT', expiry)
  return 1
end
if not rec[1] then
  return 0
end
local expiry = tonumber(rec[3])
if expiry ~= 0 and expiry <= now then
  redis.call('DEL', key)
  return 0
end
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local lease_end = now + tonumber(ARGV[2])
if tonumber(rec[4]) > 0 then
  expiry = math.max(expiry, lease_end)
else
  expiry = lease_end + ABANDONED_KEEP_MS
end
redis.call('HSET', key, 'l', string.format('%.0f', lease_end), 'x', string.format('%.0f', expiry))
redis.call('PEXPIREAT', key, string.format('%.0f', expiry))
return 1
