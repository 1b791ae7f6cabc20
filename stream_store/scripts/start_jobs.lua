-- KEYS: the queue, then, for each job id in ARGV, its arq in-progress key, job key and try
-- counter. ARGV: in-progress timeout (ms), the worker's clock (ms, as arq compares scores with
-- it), the try counter's TTL (s), the worker's free slots, how many due jobs to read at most,
-- arq's in-progress, job and try key prefixes, then the job ids to start (KEYS' order).
-- arq's claim of a job (`Worker.start_jobs`: WATCH, EXISTS, ZSCORE, MULTI/PSETEX/EXEC) and its
-- read of the claimed job (`Worker.run_job`: GET the job, INCR and EXPIRE its try counter),
-- for every job of one read of the queue in one round trip, each claim atomic: a job starts
-- only if no worker has it in progress and it is due.
-- Without job ids the script reads the queue itself (the due jobs, oldest first, up to the read
-- limit, less those in progress), so that a worker's read and its claims take one round trip:
-- if more jobs are ready than slots are free it starts none and returns {due ids}, for the
-- worker to choose between callers fairly (`runner/scheduling.py`) and call again with its
-- choice. On a Redis Cluster a job id carries the queue's hash tag (`KeySpace.job_id`): the
-- keys built here from it are on the queue's node.
-- Returns {ids, claims}: per job, false when it is not to be started here, else {score, the
-- serialized job (false if its key is gone), its try}.
local timeout_ms, now_ms, try_ttl = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local free, read_limit = tonumber(ARGV[4]), ARGV[5]
local in_progress_prefix, job_prefix, try_prefix = ARGV[6], ARGV[7], ARGV[8]
local ids, keys = {}, {}
if #ARGV > 8 then
  for i = 9, #ARGV do
    local n = i - 8
    ids[n] = ARGV[i]
    keys[n] = {KEYS[3 * n - 1], KEYS[3 * n], KEYS[3 * n + 1]}
  end
else
  -- the queue holds its jobs until they end: those in progress are not candidates
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, read_limit)
  for _, job_id in ipairs(due) do
    local in_progress = in_progress_prefix .. job_id
    if redis.call('EXISTS', in_progress) == 0 then
      ids[#ids + 1] = job_id
      keys[#ids] = {in_progress, job_prefix .. job_id, try_prefix .. job_id}
    end
  end
  -- more than fit: every due id, those in progress too (they weigh on their owner's share)
  if #ids > free then return {due} end
end
local started = {}
for n, job_id in ipairs(ids) do
  local in_progress, job_key, try_key = keys[n][1], keys[n][2], keys[n][3]
  local claim = false
  if redis.call('EXISTS', in_progress) == 0 then
    local score = redis.call('ZSCORE', KEYS[1], job_id)
    if score and tonumber(score) <= now_ms then
      redis.call('PSETEX', in_progress, timeout_ms, '1')
      local try = redis.call('INCR', try_key)
      redis.call('EXPIRE', try_key, try_ttl)
      claim = {score, redis.call('GET', job_key), try}
    end
  end
  started[n] = claim
end
return {ids, started}
