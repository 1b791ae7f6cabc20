-- KEYS: record, events, cancel flag. ARGV: attempt, lease_ms, the claiming worker's id ('' for
-- none), data of the attempt's `run`/`running` event, the status it writes (`running`, as
-- stream_store/run_status.py names it).
-- Takes the lease, checks for a cancel request and writes `running`: the start of an attempt in
-- one round trip. Returns the `running` event's id; `cancelled` (lease taken, nothing written)
-- when a cancel was requested; `retry` (lease taken, nothing written) when this attempt's
-- `retry` announcement is still to be written, which must come before `running`.
-- Refused (FENCED) when a newer attempt owns the run or the stream has its terminal event; GONE
-- when the record is missing.
local now = now_ms()
local attempt = tonumber(ARGV[1])
local rec = redis.call('HMGET', KEYS[1], 'attempt', 'retry_attempt')
if not rec[1] then return redis.error_reply('GONE run record missing') end
if tonumber(rec[1]) > attempt then
  return redis.error_reply('FENCED attempt ' .. rec[1])
end
redis.call('HSET', KEYS[1], 'attempt', ARGV[1], 'started_attempt', ARGV[1],
           'lease_until', now + tonumber(ARGV[2]))
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'worker', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'worker')
end
if redis.call('EXISTS', KEYS[3]) == 1 then return 'cancelled' end
if attempt > 1 and tonumber(rec[2] or '0') < attempt then return 'retry' end
local refused = append_fence(KEYS[1], ARGV[1], true)
if refused then return refused end
-- as append.lua with status `running`: the stream lives until the run ends
local id = redis.call('XADD', KEYS[2], '*', 'e', 'run', 'd', ARGV[4], 'a', ARGV[1])
redis.call('HSET', KEYS[1], 'last_event_id', id, 'status', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'bytes', 3 + #ARGV[4])
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
return id
