-- A semaphore's acquire. The permits are a sorted set at the semaphore's key: member the
-- holder value, score its expiry in the node's ms (leases.lua). Yes when this holder is
-- already a live member (a re-send: its expiry is kept), or fewer than P members are live.
--
-- KEYS[1] the semaphore key. ARGV[1] holder value, ARGV[2] TTL in ms, ARGV[3] P.
-- Reply: 1 or 0.
if redis.call('zscore', leases, ARGV[1]) then
  return 1
end
if redis.call('zcard', leases) < tonumber(ARGV[3]) then
  redis.call('zadd', leases, now + tonumber(ARGV[2]), ARGV[1])
  expire_at_latest()
  return 1
end
return 0
