-- KEYS: arq's in-progress key of the job, the queue. ARGV: job id, in-progress timeout (ms), the
-- worker's clock (ms, as arq compares scores with it).
-- arq's claim of a job (`Worker.start_jobs`: WATCH, EXISTS, ZSCORE, MULTI/PSETEX/EXEC) in one
-- round trip, as atomic: the job starts only if no worker has it in progress and it is due.
-- Returns its score, or nil when it is not to be started here.
if redis.call('EXISTS', KEYS[1]) == 1 then return nil end
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not score or tonumber(score) > tonumber(ARGV[3]) then return nil end
redis.call('PSETEX', KEYS[1], ARGV[2], '1')
return score
