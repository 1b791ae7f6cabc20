-- KEYS: record, events. ARGV: owner, thread_id, attempt, event, data, status.
-- Creates the run record and writes the stream's first event; a no-op (returning the last
-- event id) when the record exists.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HGET', KEYS[1], 'last_event_id')
end
local id = redis.call('XADD', KEYS[2], '*', 'e', ARGV[4], 'd', ARGV[5], 'a', ARGV[3])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'thread_id', ARGV[2], 'attempt', ARGV[3],
           'first_id', id, 'last_event_id', id, 'status', ARGV[6],
           'bytes', #ARGV[4] + #ARGV[5])
if ARGV[4] == 'retry' then redis.call('HSET', KEYS[1], 'retry_attempt', ARGV[3]) end
return id
