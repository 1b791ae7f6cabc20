-- KEYS: arq's job key, arq's result key, the queue. ARGV: job id, score (ms), job expiry (ms),
-- the serialized job (arq's format), the wake channel, the run id.
-- arq's `enqueue_job` (a WATCH, an EXISTS, then MULTI/PSETEX/ZADD/EXEC) and the wake-up PUBLISH
-- in one round trip: a job id whose job key exists (queued or running) or whose result key
-- exists is not queued again (returns 0), and then nobody is woken (the reaper's pass
-- re-enqueues every waiting run: a PUBLISH each would wake every worker for nothing).
-- runstream's job loop keeps no result key and deletes the job key when a job ends, so a job
-- that already ran IS queued again, as is one whose keys expired: what keeps a run from
-- running twice is its claim in Postgres (`RunRecords.claim_runs`: queued runs only).
if redis.call('EXISTS', KEYS[1], KEYS[2]) ~= 0 then
  return 0
end
redis.call('PSETEX', KEYS[1], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
