-- A semaphore's repair, right after a quorum confirmed a renewal: the member back for the
-- remaining validity only if it is absent and a permit is free.
--
-- KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] the remaining validity in ms,
-- ARGV[3] P.
-- Reply: 1 when it put the permit back, else 0.
if redis.call('zscore', leases, ARGV[1]) then
  return 0
end
if redis.call('zcard', leases) < tonumber(ARGV[3]) then
  redis.call('zadd', leases, now + tonumber(ARGV[2]), ARGV[1])
  expire_at_latest()
  return 1
end
return 0
