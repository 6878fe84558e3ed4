-- A multi-key lock's acquire: the whole set in one atomic step, so that two sets that overlap
-- ({a, b} against {b, a}) are decided by each node at once and cannot deadlock. Yes only if
-- every key is absent or already this holder's (a re-send after a dropped connection,
-- ordering invariant 6), and then the absent ones are set; an own key keeps the TTL the first
-- request gave it (set after the attempt's start).
--
-- KEYS the lock keys (sorted, distinct). ARGV[1] holder value, ARGV[2] TTL in ms.
-- Reply: 1 when every key is now this holder's, 0 (nothing changed) when another holder has
-- any of them.
for _, k in ipairs(KEYS) do
  local v = redis.call('get', k)
  if v and v ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('set', k, ARGV[1], 'NX', 'PX', ARGV[2])
end
return 1
