-- The holder record of a holder that shares its key (a semaphore's permit, a read-write
-- lock's reader; docs/DESIGN.md, "Who holds a lock"): one hash per key, with each holder's
-- fields named after its digest ("<sha1> label"), written only while the holder is a live
-- member of the set. The records of holders no longer in the set are dropped here; the hash
-- expires with its latest holder (the extend script moves it on).
--
-- KEYS[1] the sorted set of leases (`leases`), KEYS[2] the key's holder record. ARGV as
-- publish.lua's.
-- Reply: 1 published (or a newer record of this holder is there), 0 when the holder is not
-- a live member here.
local score = redis.call('zscore', leases, ARGV[1])
if not score then
  return 0
end
local digest = redis.sha1hex(ARGV[1])
-- An exclusive holder's record (publish.lua) has an 'h' field: it names no member.
if redis.call('hexists', KEYS[2], 'h') == 1 then
  redis.call('del', KEYS[2])
end
if tonumber(redis.call('hget', KEYS[2], digest .. ' ver') or '0') >= tonumber(ARGV[2]) then
  return 1
end
local live = {}
for _, member in ipairs(redis.call('zrange', leases, 0, -1)) do
  live[redis.sha1hex(member)] = true
end
for _, field in ipairs(redis.call('hkeys', KEYS[2])) do
  if not live[string.sub(field, 1, 40)] then
    redis.call('hdel', KEYS[2], field)
  end
end
local fields = {digest .. ' ver', ARGV[2]}
for i = 4, #ARGV, 2 do
  fields[#fields + 1] = digest .. ' ' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
end
redis.call('hset', KEYS[2], unpack(fields))
local ttl = math.floor(tonumber(score) - now)
local kept = redis.call('pttl', KEYS[2])
if ttl > 0 and (kept < 0 or kept < ttl) then
  redis.call('pexpire', KEYS[2], ttl)
end
redis.call('publish', ARGV[3], digest)
return 1
