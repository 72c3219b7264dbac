for i = 1, #ARGV / 2 do
  redis.call('LREM', KEYS[1], 1, ARGV[2 * i - 1])
  local token = ARGV[2 * i]
  if token == '*' or (token ~= '' and redis.call('GET', KEYS[i + 1]) == token) then
    redis.call('DEL', KEYS[i + 1])
  end
end
return 0
