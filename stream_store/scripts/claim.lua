-- KEYS: record. ARGV: attempt, lease_ms, the claiming worker's id ('' for none). Returns the
-- attempt that last started executing.
-- Refused (FENCED) when a newer attempt owns the run; GONE when the record is missing.
local now = now_ms()
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'started_attempt')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if tonumber(rec[1]) > tonumber(ARGV[1]) then
  return redis.error_reply('FENCED attempt ' .. rec[1])
end
redis.call('HSET', KEYS[1], 'attempt', ARGV[1], 'started_attempt', ARGV[1],
           'lease_until', now + tonumber(ARGV[2]))
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'worker', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'worker')
end
return tonumber(rec[2] or '0')
