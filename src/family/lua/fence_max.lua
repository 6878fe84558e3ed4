-- The fencing token's write-back: raises the counter to the token (never lowers it), so that
-- every later quorum, which meets this write's quorum, sees at least the token.
--
-- It writes the counter even where it is already higher (its own value again): under durable
-- votes the `WAITAOF` that follows waits for this connection's last write, and so for every
-- write before it on the node, the one that raised the counter included.
--
-- KEYS[1] the fencing counter. ARGV[1] the token.
-- Reply: 1.
local current = redis.call('get', KEYS[1])
if tonumber(current or '0') < tonumber(ARGV[1]) then
  current = ARGV[1]
end
redis.call('set', KEYS[1], current)
return 1
