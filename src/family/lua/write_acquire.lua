-- A write lock's acquire. Yes when the key already holds this holder (a re-send: its TTL is
-- kept), or when there is no writer entry and no live reader; then SET key holder PX ttl.
-- Refused because of live readers, a waiting writer (ARGV[3] not empty) sets the pending mark
-- to its request's id for the mark's own lease (ARGV[4], the client's queue lease, renewed by
-- each refused attempt: a writer that dies while it waits keeps readers out one queue lease
-- at most, not its TTL), unless another request's mark is live: the mark stops new readers,
-- so the readers drain and the writer is not starved. Other writers' marks do not stop a
-- writer.
--
-- KEYS as read_acquire.lua. ARGV[1] holder value, ARGV[2] TTL in ms, ARGV[3] the waiting
-- request's id, or empty for a single attempt (no mark), ARGV[4] the mark's lease in ms.
-- Reply: 1 or 0.
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  return 1
end
if current then
  return 0
end
if redis.call('zcard', leases) > 0 then
  if ARGV[3] ~= '' then
    local mark = redis.call('get', KEYS[3])
    if not mark or mark == ARGV[3] then
      redis.call('set', KEYS[3], ARGV[3], 'PX', ARGV[4])
    end
  end
  return 0
end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
