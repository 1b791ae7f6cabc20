-- KEYS: record. ARGV: the attempt Postgres says is running, '1' to ignore the lease (hand-back),
-- then the ids of workers whose process is gone (may be none).
-- Without gone workers, the attempt is taken when its lease ran out (or was never taken). With
-- them, only when its holder is one of them: an attempt claimed in Postgres whose lease is not
-- yet taken in Redis (its claim's two steps) belongs to a live worker, and is the lease pass's
-- once the lease time has passed.
-- 'alive' (not to be taken), 'missing' (record lost), 'taken' (fenced: attempt+1 now owns it;
-- idempotent, so a reaper that died half-way can be finished by another), 'stale' otherwise.
local now = now_ms()
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until', 'worker')
if not rec[1] then return 'missing' end
local current, seen = tonumber(rec[1]), tonumber(ARGV[1])
if current == seen + 1 then return 'taken' end
if current ~= seen then return 'stale' end
local holder_gone = false
for i = 3, #ARGV do
  if rec[3] == ARGV[i] then holder_gone = true end
end
if ARGV[2] ~= '1' and not holder_gone then
  if #ARGV >= 3 or (rec[2] and tonumber(rec[2]) >= now) then return 'alive' end
end
redis.call('HSET', KEYS[1], 'attempt', seen + 1)
redis.call('HDEL', KEYS[1], 'lease_until', 'worker')
return 'taken'
