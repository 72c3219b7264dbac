local n = 0
while redis.call('RPOPLPUSH', KEYS[1], KEYS[2]) do n = n + 1 end
return n
