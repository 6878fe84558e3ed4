-- What the holder of a lock publishes about itself beside its entry (docs/DESIGN.md, "Who
-- holds a lock"): a label, when it took the key, an election's value and term. Written only
-- where the key's entry holds this holder's value, so that a record never names a holder that
-- does not hold the key on that node; a record left by an earlier holder is replaced. Kept
-- as long as the entry (the extend script moves its expiry with the entry's).
--
-- KEYS[1] the lock key, KEYS[2] its holder record. ARGV[1] holder value, ARGV[2] the
-- record's version (a record of this holder with a version not below it is kept as it is),
-- ARGV[3] the record's channel, where a new record is announced (the holder's digest), for
-- an election's observers; ARGV[4..] field, value pairs.
-- Reply: 1 published (or a newer record of this holder is there), 0 when the key is not this
-- holder's here.
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
local digest = redis.sha1hex(ARGV[1])
local kept = redis.call('hmget', KEYS[2], 'h', 'ver')
if kept[1] == digest then
  if tonumber(kept[2] or '0') >= tonumber(ARGV[2]) then
    return 1
  end
else
  redis.call('del', KEYS[2])
end
redis.call('hset', KEYS[2], 'h', digest, 'ver', ARGV[2], unpack(ARGV, 4))
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
  redis.call('pexpire', KEYS[2], ttl)
end
redis.call('publish', ARGV[3], digest)
return 1
