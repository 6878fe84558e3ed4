-- What one node knows of a key's holder (docs/DESIGN.md, "Who holds a lock"), read in one
-- step: the kind of entry, its remaining TTL, the holder's digest (the SHA1 of its value,
-- never the value), the fencing counter, and the holder record where it names the holder of
-- the entry (a record left by an earlier holder is not shown).
--
-- KEYS[1] the lock key, KEYS[2] its holder record, KEYS[3] its fencing counter, KEYS[4] a
-- read-write lock's readers. ARGV[1] "any" only for the fail point StaleRecordShown (a
-- record shown whatever holder it names).
-- Reply: {kind, ttl ms, holders, digest or "", fencing counter or "", label, since, value,
-- term, version, members}, label to version "" where no record names the holder; members:
-- for the holders that share a key (permits, readers), {digest, version, label, since} of
-- each live holder with a record (publish_member.lua), flattened. kind: "free", "mutex"
-- (a mutex's or a write lock's entry), "fair", "semaphore" (permits), "read" (readers),
-- "broken" (only the tombstones of a break: values with a space, which no holder has).
local kind, ttl, holders, digest = 'free', -2, 0, ''
local record = {'', '', '', '', ''}
local members = {}
local now = redis.call('time')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
-- Live members: how many are holders (not a break's tombstones), how many in all, and the
-- remaining TTL of the latest; each holder's record, where the record is the members' (an
-- exclusive holder's has an 'h' field), goes to `members`.
local function live(set)
  local found = redis.call('zrangebyscore', set, '(' .. now_ms, '+inf', 'withscores')
  if #found == 0 then
    return 0, 0, -2
  end
  local shared = redis.call('hexists', KEYS[2], 'h') == 0
  local holders = 0
  for i = 1, #found, 2 do
    if not string.find(found[i], ' ', 1, true) then
      holders = holders + 1
      local d = redis.sha1hex(found[i])
      local r = shared and redis.call('hmget', KEYS[2], d .. ' ver', d .. ' label', d .. ' since')
      if r and r[1] then
        for _, v in ipairs({d, r[1], r[2] or '', r[3] or ''}) do
          members[#members + 1] = v
        end
      end
    end
  end
  return holders, #found / 2, tonumber(found[#found]) - now_ms
end
local t = redis.call('type', KEYS[1])['ok']
if t == 'string' then
  local value = redis.call('get', KEYS[1])
  kind, ttl, holders = 'mutex', redis.call('pttl', KEYS[1]), 1
  -- A fair lock's holder values start so (rules/holder.rs, FAIR_PREFIX).
  if string.sub(value, 1, 5) == 'fair:' then
    kind = 'fair'
  elseif string.find(value, ' ', 1, true) then
    kind, holders = 'broken', 0
  end
  digest = redis.sha1hex(value)
  local r = redis.call('hmget', KEYS[2], 'h', 'label', 'since', 'value', 'term', 'ver')
  if r[1] == digest or (ARGV[1] == 'any' and r[1]) then
    for i = 2, 6 do
      record[i - 1] = r[i] or ''
    end
  end
elseif t == 'zset' then
  local all
  holders, all, ttl = live(KEYS[1])
  if holders > 0 then
    kind = 'semaphore'
  elseif all > 0 then
    kind = 'broken'
  end
end
if kind == 'free' and redis.call('exists', KEYS[4]) == 1 then
  local all
  holders, all, ttl = live(KEYS[4])
  if holders > 0 then
    kind = 'read'
  elseif all > 0 then
    kind = 'broken'
  end
end
local fence = redis.call('get', KEYS[3]) or ''
return {kind, ttl, holders, digest, fence, record[1], record[2], record[3], record[4], record[5],
  members}
