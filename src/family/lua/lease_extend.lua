-- The extend of a live member of a sorted set of leases (a semaphore's permit, a read-write
-- lock's reader): ZADD XX, never re-added once expired.
--
-- KEYS[1] the sorted set. ARGV[1] holder value, ARGV[2] the new TTL in ms.
-- Reply: 1 or 0.
if not redis.call('zscore', leases, ARGV[1]) then
  return 0
end
redis.call('zadd', leases, 'XX', now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
