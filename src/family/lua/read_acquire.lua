-- A read lock's acquire. Yes when this reader is already a live member (a re-send: its expiry
-- is kept), or when there is no writer entry and no pending-writer mark (a waiting writer
-- stops new readers); then the reader becomes a member with its own expiry.
--
-- KEYS[1] the key (the writer's entry), KEYS[2] the readers' sorted set, KEYS[3] the
-- pending-writer mark. ARGV[1] holder value, ARGV[2] TTL in ms.
-- Reply: 1 or 0.
if redis.call('zscore', leases, ARGV[1]) then
  return 1
end
if redis.call('exists', KEYS[1]) == 1 or redis.call('exists', KEYS[3]) == 1 then
  return 0
end
redis.call('zadd', leases, now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
