local want = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cap = {}
for i = 4, #ARGV, 2 do cap[ARGV[i]] = tonumber(ARGV[i + 1]) end
local jobs = redis.call('LRANGE', KEYS[1], -window, -1)
local taken, passed = {}, {}
local passed_before_last_taken = 0
for i = #jobs, 1, -1 do
  if #taken >= want then break end
  local job = jobs[i]
  local w = string.match(job, '"webhook_id":(%d+)')
  local c = w and cap[w]
  if c ~= nil and c <= 0 then
    passed[#passed + 1] = job
  else
    if c ~= nil then cap[w] = c - 1 end
    redis.call('LREM', KEYS[1], -1, job)
    redis.call('LPUSH', KEYS[2], job)
    taken[#taken + 1] = job
    passed_before_last_taken = #passed
  end
end
local move = passed_before_last_taken
if #taken == 0 and ARGV[3] == '1' and redis.call('LLEN', KEYS[1]) > window then move = #passed end
for i = 1, move do
  redis.call('LREM', KEYS[1], -1, passed[i])
  redis.call('LPUSH', KEYS[1], passed[i])
end
return {taken, #passed}
