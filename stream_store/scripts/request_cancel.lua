-- KEYS: the run's cancel flag. ARGV: its TTL (s), the cancel channel, the run id.
-- Flags the run as cancelled and tells every worker (a PUBLISH reaches every node of a
-- cluster). A Redis at `maxmemory` refuses the flag, and the script stops before publishing.
redis.call('SET', KEYS[1], '1', 'EX', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
