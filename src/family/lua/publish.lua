-- What the holder of a lock publishes about itself beside its entry (docs/DESIGN.md, "Who
-- holds a lock"): a label, when it took the key, an election's value and term. Written only
-- where every entry holds this holder's value, so that a record never names a holder that
-- does not hold the key on that node; a record left by an earlier holder is replaced. Kept
-- as long as the entry (the extend script moves its expiry with the entry's).
--
-- KEYS pairs: an entry (a mutex's, a fair lock's, a writer's, each key of a multi-key lock),
-- then its holder record. ARGV[1] holder value, ARGV[2] the record's version (a record of
-- this holder with a version not below it is kept as it is), ARGV[3] the channel where a new
-- record is announced (the holder's digest), for an election's observers; ARGV[4..] field,
-- value pairs.
-- Reply: 1 published (or a newer record of this holder is there), 0 when an entry is not
-- this holder's here (then nothing is written).
for i = 1, #KEYS, 2 do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
local digest = redis.sha1hex(ARGV[1])
local written = false
for i = 1, #KEYS, 2 do
  local record = KEYS[i + 1]
  local kept = redis.call('hmget', record, 'h', 'ver')
  if kept[1] ~= digest or tonumber(kept[2] or '0') < tonumber(ARGV[2]) then
    if kept[1] ~= digest then
      redis.call('del', record)
    end
    redis.call('hset', record, 'h', digest, 'ver', ARGV[2], unpack(ARGV, 4))
    local ttl = redis.call('pttl', KEYS[i])
    if ttl > 0 then
      redis.call('pexpire', record, ttl)
    end
    written = true
  end
end
if written then
  redis.call('publish', ARGV[3], digest)
end
return 1
