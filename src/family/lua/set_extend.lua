-- A multi-key lock's extend: only where every key is still this holder's, and then PEXPIRE
-- all of them; otherwise nothing changes. Never creates a key.
--
-- KEYS the lock keys. ARGV[1] holder value, ARGV[2] the new TTL in ms.
-- Reply: 1 or 0.
for _, k in ipairs(KEYS) do
  if redis.call('get', k) ~= ARGV[1] then
    return 0
  end
end
for _, k in ipairs(KEYS) do
  redis.call('pexpire', k, ARGV[2])
end
return 1
