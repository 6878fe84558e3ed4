-- A multi-key lock's extend: only where every key is still this holder's, and then PEXPIRE
-- all of them; otherwise nothing changes. Never creates a key. With holder records
-- (publish.lua), they expire with the entries.
--
-- KEYS the lock keys, then (when ARGV[3] says how many lock keys there are) each key's
-- holder record in the same order. ARGV[1] holder value, ARGV[2] the new TTL in ms.
-- Reply: 1 or 0.
local n = tonumber(ARGV[3] or #KEYS)
for i = 1, n do
  if redis.call('get', KEYS[i]) ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('pexpire', k, ARGV[2])
end
return 1
