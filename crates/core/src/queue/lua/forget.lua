redis.call('LREM', KEYS[1], -1, ARGV[1])
redis.call('DEL', KEYS[2])
return 0
