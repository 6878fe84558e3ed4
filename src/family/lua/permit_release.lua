-- A semaphore's release (and rollback): ZREM, then the notice (notice.lua), for a release
-- wherever a permit is free now.
--
-- KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the
-- notice mode, ARGV[4] P.
-- Reply: 1 when the holder had a live permit here, else 0.
local held = redis.call('zrem', leases, ARGV[1]) == 1
expire_at_latest()
notify_release(held, ARGV[3], ARGV[2], redis.sha1hex(ARGV[1]), function()
  return redis.call('zcard', leases) < tonumber(ARGV[4])
end)
return flag(held)
