-- KEYS: record. ARGV: attempt, lease_ms.
-- Refused (FENCED) when another attempt owns the run, or when its lease is gone or ran out.
local now = now_ms()
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'lease_until')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if rec[1] ~= ARGV[1] then return redis.error_reply('FENCED attempt ' .. rec[1]) end
if not rec[2] or tonumber(rec[2]) < now then
  return redis.error_reply('FENCED lease expired')
end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[2]))
return 1
