-- The mutex's acquire, re-sent after the connection dropped before its answer came: the first
-- request may have been applied. Takes the key when it is free, and counts it as taken when
-- it already holds this holder's value. Never touches another holder's entry, and leaves the
-- TTL of an own entry as it is: the first request set it after the attempt's start, so it
-- expires no earlier than the deadline the client computes from that start.
--
-- KEYS[1] the lock key. ARGV[1] holder value, ARGV[2] TTL in ms.
-- Reply: OK (taken, or already this holder's), or nil when another holder has the key: the
-- answers of SET NX.
local current = redis.call('get', KEYS[1])
if current == ARGV[1] then
  return redis.status_reply('OK')
end
if current then
  return false
end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
