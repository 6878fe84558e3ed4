-- A read lock's repair, right after a quorum confirmed a renewal: the member back for the
-- remaining validity only if it is absent and no writer holds the key here. A pending-writer
-- mark does not stop it: the mark keeps new readers out, and this reader holds on a quorum.
--
-- KEYS as read_acquire.lua. ARGV[1] holder value, ARGV[2] the remaining validity in ms.
-- Reply: 1 when it put the member back, else 0.
if redis.call('zscore', leases, ARGV[1]) then
  return 0
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('zadd', leases, now + tonumber(ARGV[2]), ARGV[1])
expire_at_latest()
return 1
