#!lua
-- complete.lua: store the response while the record holds the token (store.Store.Complete).
-- KEYS[1] record key. ARGV[1] token, ARGV[2] response (encoded: flags,
-- status, headers, trailers, body), ARGV[3] events channel,
-- ARGV[4] "1" = a repeat by the token that completed the record re-confirms it,
-- ARGV[5] (optional) the rest of the response, appended to ARGV[2]: the
-- caller sends the body apart from the rest so it need not copy it.
-- Returns 1 when completed (or re-confirmed), 0 when the token does not hold
-- the record, 2 when the record is a string (layout 4: complete4.lua's).
-- Layout 3: the completed record keeps s, x, v, ct (and ca) and puts the rest
-- (identity, fingerprint, recipe, created, stored at, then ARGV[2] .. ARGV[5]) in one
-- string cut into 64-byte fields p0, p1, ... (pn of them), so that every
-- value stays within hash-max-listpack-value and the hash a listpack.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- The same instant as a string, from TIME's own digits (seconds, then the
-- first three of the zero-padded microseconds): no sprintf. Numbers go to
-- redis.call as they are (Valkey writes an integral number as its plain
-- digits), and the field names come from P: each number made a string in
-- Lua is a sprintf, which was a seventh of the server's CPU per fresh key.
local now_s = t[1] .. string.sub('00000' .. t[2], -6, -4)
local P = {'p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 'p9', 'p10', 'p11',
  'p12', 'p13', 'p14', 'p15', 'p16', 'p17', 'p18', 'p19', 'p20', 'p21', 'p22', 'p23',
  'p24', 'p25', 'p26', 'p27', 'p28', 'p29', 'p30', 'p31', 'p32', 'p33', 'p34', 'p35',
  'p36', 'p37', 'p38', 'p39', 'p40', 'p41', 'p42', 'p43', 'p44', 'p45', 'p46', 'p47'}
local rec = redis.pcall('HMGET', key, 's', 't', 'x', 'rt', 'ct', 'o', 'r', 'k', 'f', 'fr', 'c')
if rec.err then
  return 2
end
if not rec[1] then
  return 0
end
if tonumber(rec[3]) ~= 0 and tonumber(rec[3]) <= now then
  redis.call('DEL', key)
  return 0
end
if rec[1] == 'completed' and ARGV[4] == '1' and rec[5] == ARGV[1] then
  -- A repeat whose acknowledgement the caller waits for: write a marker so
  -- that the WAIT after this script covers the completion too.
  redis.call('HSET', key, 'ca', now)
  return 1
end
if rec[1] ~= 'running' or rec[2] ~= ARGV[1] then
  return 0
end
local retention = tonumber(rec[4])
local expiry = 0
if retention > 0 then
  expiry = now + retention
end
local function ns(s)
  return #s .. ':' .. s
end
-- A layout 1 running record has no recipe: it completes with an empty one.
local r = ns(rec[6]) .. ns(rec[7]) .. ns(rec[8]) .. ns(rec[9]) .. ns(rec[10] or '') ..
  ns(rec[11]) .. ns(now_s) .. ARGV[2] .. (ARGV[5] or '')
-- Past 48 fields the hash would leave the listpack anyway: one field then.
local size = 64
if #r > 3072 then
  size = #r
end
local n = math.ceil(#r / size)
local fields = {'s', 'completed', 'x', expiry, 'ct', ARGV[1], 'v', '3', 'pn', n}
for i = 0, n - 1 do
  fields[#fields + 1] = P[i + 1]
  fields[#fields + 1] = string.sub(r, i * size + 1, (i + 1) * size)
end
-- The hash is replaced, not trimmed: the running record was converted to a
-- hashtable (its fingerprint is longer than 64 bytes) and a hash never
-- converts back to a listpack. Safe under maxmemory: this script declares
-- it may write, so a full server refuses it before the DEL, and an HSET of
-- strings cannot fail after it.
redis.call('DEL', key)
redis.call('HSET', key, unpack(fields))
if retention > 0 then
  redis.call('PEXPIREAT', key, expiry)
else
  redis.call('PERSIST', key)
end
redis.call('PUBLISH', ARGV[3], key)
return 1
