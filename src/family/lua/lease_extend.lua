-- The extend of a live member of a sorted set of leases (a semaphore's permit, a read-write
-- lock's reader): ZADD XX, never re-added once expired. With a second key, the key's holder
-- record (publish_member.lua) is kept at least as long (only where it exists).
--
-- KEYS[1] the sorted set, KEYS[2] (optional) the holder record. ARGV[1] holder value,
-- ARGV[2] the new TTL in ms.
-- Reply: 1 or 0.
if not redis.call('zscore', leases, ARGV[1]) then
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('zadd', leases, 'XX', now + ttl, ARGV[1])
expire_at_latest()
if #KEYS > 1 then
  local kept = redis.call('pttl', KEYS[2])
  if kept == -1 or (kept >= 0 and kept < ttl) then
    redis.call('pexpire', KEYS[2], ttl)
  end
end
return 1
