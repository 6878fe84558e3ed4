-- A multi-key lock's fencing increment: every key's counter, answering the largest.
--
-- KEYS the fencing counters.
-- Reply: the largest new value.
local m = 0
for _, k in ipairs(KEYS) do
  local v = redis.call('incr', k)
  if v > m then
    m = v
  end
end
return m
