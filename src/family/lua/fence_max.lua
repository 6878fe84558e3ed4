-- The fencing token's write-back: raises the counter to the token (never lowers it), so that
-- every later quorum, which meets this write's quorum, sees at least the token.
--
-- KEYS[1] the fencing counter. ARGV[1] the token.
-- Reply: 1.
local current = tonumber(redis.call('get', KEYS[1]) or '0')
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
