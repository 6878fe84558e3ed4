-- A write lock's repair, right after a quorum confirmed a renewal: SET NX PX
-- remaining-validity only if no reader is live here (and, by NX, no other writer).
--
-- KEYS as read_acquire.lua. ARGV[1] holder value, ARGV[2] the remaining validity in ms.
-- Reply: 1 when it put the entry back, else 0.
if redis.call('zcard', leases) > 0 then
  return 0
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
