-- KEYS: arq's job key, arq's result key, the queue. ARGV: job id, score (ms), job expiry (ms),
-- the serialized job (arq's format), the wake channel, the run id.
-- arq's `enqueue_job` (a WATCH, an EXISTS, then MULTI/PSETEX/ZADD/EXEC) and the wake-up PUBLISH
-- in one round trip: a job id already queued or run is not queued again (returns 0); the
-- workers are woken either way.
local queued = 0
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  redis.call('PSETEX', KEYS[1], ARGV[3], ARGV[4])
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
  queued = 1
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return queued
