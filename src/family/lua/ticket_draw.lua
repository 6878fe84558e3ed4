-- A fair lock's ticket drawn in a round of its own (when fewer than a quorum of nodes drew it
-- with the request's first attempt): INCR of the ticket counter, which then lives at least a
-- queue lease (a waiter that dies before it joins the line leaves no counter for ever; the
-- line's scripts keep it as long as the line and delete it with it).
--
-- KEYS[1] the ticket counter. ARGV[1] the queue lease in ms.
-- Reply: the new value.
local n = redis.call('incr', KEYS[1])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return n
