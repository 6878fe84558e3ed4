-- A read lock's release (and rollback): ZREM, then the notice where the key is now free for a
-- writer (no live reader, no writer entry): for a release (mode "1") also where this reader
-- was not a member, for a rollback only where this call removed it. When a writer waits (its
-- pending mark is here), the notice names the mark (drained: and its digest), not this
-- reader: readers that release at once finish in different orders on different nodes, and
-- notices that each named the node's last reader would split between them, so that none
-- reached the quorum that wakes the writer.
--
-- KEYS as read_acquire.lua. ARGV[1] holder value, ARGV[2] release channel, ARGV[3] the notice
-- mode.
-- Reply: 1 when the reader was a live member here, else 0.
local held = redis.call('zrem', leases, ARGV[1]) == 1
expire_at_latest()
if (held or ARGV[3] == '1') and redis.call('zcard', leases) == 0
    and redis.call('exists', KEYS[1]) == 0 then
  local mark = redis.call('get', KEYS[3])
  if mark then
    redis.call('publish', ARGV[2], 'drained:' .. redis.sha1hex(mark))
  else
    redis.call('publish', ARGV[2], redis.sha1hex(ARGV[1]))
  end
end
return flag(held)
