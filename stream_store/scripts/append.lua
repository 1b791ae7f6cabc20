-- KEYS: record, events. ARGV: attempt, event, data, status ('' = unchanged), ttl_s ('' = keep,
-- '-1' = none: a resumed run's stream is kept until it ends), settled ('1' = Postgres already
-- recorded this attempt's outcome), expected status ('' = any: else refused, FENCED, when the
-- record's status is another; a status written after the Postgres commit that no later status
-- may have overtaken), the status that keeps the attempt's lease (`running`: any other status
-- written drops it; stream_store/run_status.py names the statuses).
-- Fenced by `append_fence` (_fence.lua). The events that report an outcome Postgres accepted
-- from this attempt are exempt from the lease (not from the attempt check): the outcome is
-- decided, and its stream must say so. The event's bytes are counted (`bytes`, see
-- append_batch.lua) but never refused: the outcome of a run past its bounds must still be told.
local refused = append_fence(KEYS[1], ARGV[1], ARGV[6] ~= '1')
if refused then return refused end
if ARGV[7] ~= '' then
  local status = redis.call('HGET', KEYS[1], 'status')
  if status ~= ARGV[7] then return redis.error_reply('FENCED status ' .. tostring(status)) end
end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2], 'd', ARGV[3], 'a', ARGV[1])
redis.call('HSET', KEYS[1], 'last_event_id', id)
redis.call('HINCRBY', KEYS[1], 'bytes', #ARGV[2] + #ARGV[3])
if ARGV[2] == 'done' or ARGV[2] == 'error' then redis.call('HSET', KEYS[1], 'ended', '1') end
if ARGV[2] == 'retry' then redis.call('HSET', KEYS[1], 'retry_attempt', ARGV[1]) end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'status', ARGV[4])
  if ARGV[4] ~= ARGV[8] then redis.call('HDEL', KEYS[1], 'lease_until') end
end
if ARGV[5] == '-1' then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
elseif ARGV[5] ~= '' then
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
return id
