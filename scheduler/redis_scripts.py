"""Lua sources of the Redis frontier (see ``scheduler.redis_frontier`` for the key layout).

Every script gets the key prefix as ARGV[1] and "now" (when it needs a time) from the caller's
clock, never from TIME, so tests control time. Each script is one atomic step.

Encodings used here:
- ``pfx``: 6 bytes, ``2^48 - 1 - seq`` big-endian, where ``seq`` is the URL's discovery number.
  Zset members with equal scores sort by bytes, so among equal priorities the *largest* member
  (``ZREVRANGE``) is the earliest discovered and the smallest (``ZRANGE``) the latest.
- host queue member: ``pfx .. fp`` (fp = the URL's 8-byte fingerprint); score = priority.
- ready / worst member: ``pfx .. host`` of the host's best / lowest URL; score = its priority.
- best member: ``host``; score = the priority of the host's best URL (every host with URLs).
- lease_priority member: ``fp`` of a leased URL; score = its priority.
- task value: ``pfx .. json``; lease value: ``token TAB host TAB score TAB pfx .. json``.
"""

from __future__ import annotations

PRELUDE = r"""
local P = ARGV[1]
local TASK, READY, WORST = P .. 'task', P .. 'ready', P .. 'worst'
local SLEEP, BUSY, LEASE, DEADLINE = P .. 'sleep', P .. 'busy', P .. 'lease', P .. 'deadline'
local SEQ, EVICTED, SEEN_COUNT = P .. 'seq', P .. 'evicted', P .. 'seen_count'
local BEST, LEASE_PRIORITY, WAKE = P .. 'best', P .. 'lease_priority', P .. 'wake'
local RECENT, RECENT_COUNT = P .. 'recent', P .. 'recent_count'
local DOMAIN = P .. 'domain'

-- the registered domain of a host (domain diversity), as PUSH recorded it
local function domain_of(host) return redis.call('HGET', DOMAIN, host) or host end

local function qkey(host) return P .. 'q:' .. host end

local function seq_prefix(seq)
  local n = 281474976710655 - seq
  local b = {}
  for i = 6, 1, -1 do
    b[i] = n % 256
    n = (n - b[i]) / 256
  end
  return string.char(b[1], b[2], b[3], b[4], b[5], b[6])
end

local function top_of(q)
  local r = redis.call('ZREVRANGE', q, 0, 0, 'WITHSCORES')
  if r[1] then return r end
  return nil
end

local function bottom_of(q)
  local r = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if r[1] then return r end
  return nil
end

local function same(a, b)
  if a == nil or b == nil then return a == b end
  return a[1] == b[1] and a[2] == b[2]
end

local function host_entry(entry, host) return string.sub(entry[1], 1, 6) .. host end

local function is_idle(host)
  return redis.call('SISMEMBER', BUSY, host) == 0 and not redis.call('ZSCORE', SLEEP, host)
end

-- keep WORST and BEST (every host with URLs) and READY (idle hosts with URLs) in step with
-- host queue q
local function reindex(host, q, old_top, old_bottom)
  local new_top, new_bottom = top_of(q), bottom_of(q)
  if not same(old_bottom, new_bottom) then
    if old_bottom then redis.call('ZREM', WORST, host_entry(old_bottom, host)) end
    if new_bottom then redis.call('ZADD', WORST, new_bottom[2], host_entry(new_bottom, host)) end
  end
  if not same(old_top, new_top) then
    if new_top then
      redis.call('ZADD', BEST, new_top[2], host)
    else
      redis.call('ZREM', BEST, host)
    end
    local listed
    if old_top then
      listed = redis.call('ZREM', READY, host_entry(old_top, host)) == 1
    else
      listed = is_idle(host)
    end
    if listed and new_top then
      redis.call('ZADD', READY, new_top[2], host_entry(new_top, host))
    end
  end
end

local function evict_lowest()
  local lowest = redis.call('ZRANGE', WORST, 0, 0)[1]
  if not lowest then return end
  local host = string.sub(lowest, 7)
  local q = qkey(host)
  local top, bottom = top_of(q), bottom_of(q)
  redis.call('ZREM', q, bottom[1])
  redis.call('HDEL', TASK, string.sub(bottom[1], 7))
  reindex(host, q, top, bottom)
  redis.call('INCR', EVICTED)
end

-- queue a URL, or raise its priority if it is queued; pfx keeps a returned lease's order
local function enqueue(host, fp, score, body, pfx, max_size)
  local q = qkey(host)
  local current = redis.call('HGET', TASK, fp)
  if current then
    pfx = string.sub(current, 1, 6)
    local old = redis.call('ZSCORE', q, pfx .. fp)
    if not old or tonumber(old) >= tonumber(score) then return 0 end
  end
  local top, bottom = top_of(q), bottom_of(q)
  if not pfx then pfx = seq_prefix(redis.call('INCR', SEQ)) end
  redis.call('ZADD', q, score, pfx .. fp)
  redis.call('HSET', TASK, fp, pfx .. body)
  reindex(host, q, top, bottom)
  if not current and redis.call('HLEN', TASK) > max_size then evict_lowest() end
  return 1
end

local function free_host(host, ready_at, now)
  redis.call('SREM', BUSY, host)
  if ready_at > now then
    redis.call('ZADD', SLEEP, ready_at, host)
    return
  end
  redis.call('ZREM', SLEEP, host)
  local top = top_of(qkey(host))
  if top then redis.call('ZADD', READY, top[2], host_entry(top, host)) end
end

-- sleeping hosts whose ready time has come join READY (amortised: once per ack).
-- Invariant: a host is in at most one of BUSY, SLEEP, READY.
local function promote(now)
  local due = redis.call('ZRANGEBYSCORE', SLEEP, '-inf', now, 'LIMIT', 0, 1000)
  for _, host in ipairs(due) do
    redis.call('ZREM', SLEEP, host)
    local top = top_of(qkey(host))
    if top then redis.call('ZADD', READY, top[2], host_entry(top, host)) end
  end
end

local function parse_lease(v)
  local a = string.find(v, '\t', 1, true)
  local b = string.find(v, '\t', a + 1, true)
  local c = string.find(v, '\t', b + 1, true)
  return string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1, c - 1),
         string.sub(v, c + 1)
end

-- end a lease; with requeue the URL goes back to its host queue in its old place
local function end_lease(fp, v, requeue, ready_at, now, max_size, body)
  local _, host, score, stored = parse_lease(v)
  redis.call('HDEL', LEASE, fp)
  redis.call('ZREM', DEADLINE, fp)
  redis.call('ZREM', LEASE_PRIORITY, fp)
  if requeue then
    if not body or body == '' then body = string.sub(stored, 7) end
    enqueue(host, fp, score, body, string.sub(stored, 1, 6), max_size)
  end
  free_host(host, ready_at, now)
end

-- domain diversity (soft, as LocalFrontier): the READY entry to pop. The best ready host, unless
-- it is among the last diversity - 1 popped (RECENT_COUNT) and a host that is not has a best URL
-- of at least slack x the best ready one (and min). At most diversity - 1 hosts are recent, so
-- the first diversity - 1 entries after the best one hold such a host if any does: a pop
-- examines O(diversity) hosts, never all of them. nil if none is ready or the best is below min.
local function pick_ready(min, diversity, slack)
  local head = redis.call('ZREVRANGE', READY, 0, 0, 'WITHSCORES')
  if not head[1] then return nil end
  local top = tonumber(head[2])
  if min and top < min then return nil end
  local top_domain = domain_of(string.sub(head[1], 7))
  if diversity <= 1 or redis.call('HEXISTS', RECENT_COUNT, top_domain) == 0 then
    return head[1]
  end
  local bound = slack * top
  if min and min > bound then bound = min end
  local near = redis.call('ZREVRANGEBYSCORE', READY, '+inf', string.format('%.17g', bound),
                          'LIMIT', 1, diversity - 1)
  for _, entry in ipairs(near) do
    if redis.call('HEXISTS', RECENT_COUNT, domain_of(string.sub(entry, 7))) == 0 then
      return entry
    end
  end
  return head[1]
end

-- keep the last diversity - 1 hosts popped (a capped list, and a count per host for O(1) checks)
local function remember_host(host, diversity)
  if diversity <= 1 then return end
  redis.call('LPUSH', RECENT, host)
  redis.call('HINCRBY', RECENT_COUNT, host, 1)
  while redis.call('LLEN', RECENT) > diversity - 1 do
    local old = redis.call('RPOP', RECENT)
    if redis.call('HINCRBY', RECENT_COUNT, old, -1) <= 0 then
      redis.call('HDEL', RECENT_COUNT, old)
    end
  end
end

-- lease the best URL of the ready host pick_ready chooses (call promote first); nil when no host
-- is ready or (min given) the best ready URL is below min. Returns pfx .. json, lease token,
-- priority.
local function pop_one(now, lease_seconds, min, diversity, slack)
  local best = pick_ready(min, diversity, slack)
  if not best then return nil end
  redis.call('ZREM', READY, best)
  local host = string.sub(best, 7)
  local q = qkey(host)
  local top, bottom = top_of(q), bottom_of(q)
  if not top then return nil end
  redis.call('ZREM', q, top[1])
  local fp = string.sub(top[1], 7)
  local stored = redis.call('HGET', TASK, fp)
  redis.call('HDEL', TASK, fp)
  reindex(host, q, top, bottom)
  redis.call('SADD', BUSY, host)
  remember_host(domain_of(host), diversity)
  local token = string.format('%d', redis.call('INCR', SEQ))
  redis.call('HSET', LEASE, fp, token .. '\t' .. host .. '\t' .. top[2] .. '\t' .. stored)
  redis.call('ZADD', DEADLINE, now + lease_seconds, fp)
  redis.call('ZADD', LEASE_PRIORITY, top[2], fp)
  return stored, token, top[2]
end

-- return up to batch expired leases to their host queues; how many deadlines were due
local function reap_due(now, delay, max_size, batch)
  local due = redis.call('ZRANGEBYSCORE', DEADLINE, '-inf', now, 'LIMIT', 0, batch)
  for _, fp in ipairs(due) do
    local v = redis.call('HGET', LEASE, fp)
    if v then
      end_lease(fp, v, true, now + delay, now, max_size)
    else
      redis.call('ZREM', DEADLINE, fp)
      redis.call('ZREM', LEASE_PRIORITY, fp)
    end
  end
  return #due
end

-- the best priority queued over every host (ready, sleeping or busy) as a string, nil if none.
-- BEST holds exactly the hosts of WORST; a frontier written before BEST existed (fewer members)
-- gets it built here once, from the host queues.
local function best_priority()
  if redis.call('ZCARD', BEST) ~= redis.call('ZCARD', WORST) then
    redis.call('DEL', BEST)
    for _, entry in ipairs(redis.call('ZRANGE', WORST, 0, -1)) do
      local host = string.sub(entry, 7)
      local top = top_of(qkey(host))
      if top then redis.call('ZADD', BEST, top[2], host) end
    end
  end
  return redis.call('ZREVRANGE', BEST, 0, 0, 'WITHSCORES')[2]
end
"""

# ARGV: prefix, max_size, dedup ('1' = add_new), then per URL: host, its registered domain, fp,
# score, body [, seen shard, seen value]. Returns 1/0 per URL (added or raised).
PUSH = PRELUDE + r"""
local max_size = tonumber(ARGV[2])
local dedup = ARGV[3] == '1'
local step = 5
if dedup then step = 7 end
local results = {}
for i = 4, #ARGV, step do
  local host, fp, score, body = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if ARGV[i + 1] ~= host then redis.call('HSETNX', DOMAIN, host, ARGV[i + 1]) end
  local added = 0
  if not dedup then
    added = enqueue(host, fp, score, body, nil, max_size)
  elseif redis.call('SADD', P .. 'seen:' .. ARGV[i + 5], ARGV[i + 6]) == 1 then
    redis.call('INCR', SEEN_COUNT)
    added = enqueue(host, fp, score, body, nil, max_size)
  elseif redis.call('HEXISTS', TASK, fp) == 1 then
    added = enqueue(host, fp, score, body, nil, max_size)
  end
  results[#results + 1] = added
end
return results
"""

# ARGV: prefix, then pairs (seen shard, seen value). Returns how many were new.
MARK_SEEN = PRELUDE + r"""
local new = 0
for i = 2, #ARGV, 2 do
  new = new + redis.call('SADD', P .. 'seen:' .. ARGV[i], ARGV[i + 1])
end
if new > 0 then redis.call('INCRBY', SEEN_COUNT, new) end
return new
"""

# ARGV: prefix, now, lease seconds, min priority ('' = any), domain diversity, slack. Returns
# {json, token} or nil (nil too when the best ready URL is below the min priority: then every
# ready URL is).
POP = PRELUDE + r"""
local now = tonumber(ARGV[2])
promote(now)
local stored, token = pop_one(now, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
                              tonumber(ARGV[6]))
if not stored then return false end
return {string.sub(stored, 7), token}
"""

# One dispatcher round of a crawl (``RedisFrontier.dispatch``). ARGV: prefix, now, lease
# seconds, counters key, config key, config sha1, max pages, max in flight, priority slack, low
# slots, reap batch (0 = no reap), reap delay, max size, active crawls set, crawl id, low share
# (low pops at most this share of all pops: P .. 'started' and 'low_started' count them),
# domain diversity, diversity slack (each pop follows ``pick_ready``'s rule, as ``POP``), low
# after idle (seconds without a pop after which a low one may go anyway: P .. 'last_start').
# Returns
# {-1} when the crawl is no longer active, {0} when its config is gone or changed (nothing done
# in either case), else {1, fetched, in flight, queued, reaped, seconds until the next
# sleeping host wakes ('' = none), then json, token per leased URL}. The pops follow the
# low-priority slots rule as ``Dispatcher`` documents it, with the bound taken once per round.
DISPATCH = PRELUDE + r"""
local now, lease_seconds = tonumber(ARGV[2]), tonumber(ARGV[3])
if redis.call('SISMEMBER', ARGV[14], ARGV[15]) == 0 then return {-1} end
local raw = redis.call('GET', ARGV[5])
if not raw or redis.sha1hex(raw) ~= ARGV[6] then return {0} end
redis.call('DEL', WAKE)
local reaped = 0
if tonumber(ARGV[11]) > 0 then
  reaped = reap_due(now, tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[11]))
end
local fetched = tonumber(redis.call('HGET', ARGV[4], 'fetched') or '0')
local in_flight = redis.call('HLEN', LEASE)
local budget = tonumber(ARGV[7]) - fetched - in_flight
local max_in_flight, low_slots = tonumber(ARGV[8]), tonumber(ARGV[10])
local best, low_below, low_in_flight = best_priority(), nil, 0
local low_share = tonumber(ARGV[16])
local diversity, slack = tonumber(ARGV[17]), tonumber(ARGV[18])
local low_after_idle = tonumber(ARGV[19])
local started = tonumber(redis.call('GET', P .. 'started') or '0')
local low_started = tonumber(redis.call('GET', P .. 'low_started') or '0')
local last_start = tonumber(redis.call('GET', P .. 'last_start') or '0')
if best then
  low_below = tonumber(ARGV[9]) * tonumber(best)
  low_in_flight = redis.call('ZCOUNT', LEASE_PRIORITY, '-inf',
                             '(' .. string.format('%.17g', low_below))
end
promote(now)
local out = {}
while in_flight < max_in_flight and budget > 0 do
  local min = nil
  local low_spent = low_started >= low_share * (started + 1)
                    and now - last_start < low_after_idle
  if low_below and (low_in_flight >= low_slots or low_spent) then min = low_below end
  local stored, token, score = pop_one(now, lease_seconds, min, diversity, slack)
  if not stored then break end
  out[#out + 1] = string.sub(stored, 7)
  out[#out + 1] = token
  in_flight, budget = in_flight + 1, budget - 1
  started, last_start = started + 1, now
  if low_below and tonumber(score) < low_below then
    low_in_flight, low_started = low_in_flight + 1, low_started + 1
  end
end
if #out > 0 then
  redis.call('MSET', P .. 'started', started, P .. 'low_started', low_started,
             P .. 'last_start', string.format('%.17g', last_start))
end
local ready_in = ''
local first = redis.call('ZRANGE', SLEEP, 0, 0, 'WITHSCORES')
if first[1] then ready_in = string.format('%.17g', math.max(0, tonumber(first[2]) - now)) end
local reply = {1, fetched, in_flight, redis.call('HLEN', TASK), reaped, ready_in}
for _, item in ipairs(out) do reply[#reply + 1] = item end
return reply
"""

# ARGV: prefix, now, fp, token ('' = any), seconds until the host is ready, requeue ('1'/'0'),
# max_size, counters key ('' = none), the task's JSON to queue again ('' = as leased), then pairs
# (counter, delta). Returns {0} if the lease is
# gone (reaped) or belongs to a later pop: nothing is done, the counters are left alone too
# (the live lease's holder counts the URL). Else the lease ends, the deltas are added and a
# token is left in WAKE for the dispatcher: {1, the new value of each counter}.
FINISH = PRELUDE + r"""
local now = tonumber(ARGV[2])
local v = redis.call('HGET', LEASE, ARGV[3])
if not v then return {0} end
local token = parse_lease(v)
if ARGV[4] ~= '' and ARGV[4] ~= token then return {0} end
end_lease(ARGV[3], v, ARGV[6] == '1', now + tonumber(ARGV[5]), now, tonumber(ARGV[7]), ARGV[9])
if redis.call('LLEN', WAKE) == 0 then redis.call('RPUSH', WAKE, '1') end
local reply = {1}
if ARGV[8] ~= '' then
  for i = 10, #ARGV, 2 do
    reply[#reply + 1] = redis.call('HINCRBY', ARGV[8], ARGV[i], ARGV[i + 1])
  end
end
return reply
"""

# ARGV: prefix, now, seconds until the host is ready, max_size, batch. Returns leases returned.
REAP = PRELUDE + r"""
return reap_due(tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
"""

# ARGV: prefix, now. Seconds until some host is ready ('0' if one is), nil if none is waiting.
NEXT_READY = PRELUDE + r"""
local now = tonumber(ARGV[2])
promote(now)
if redis.call('ZCARD', READY) > 0 then return '0' end
local first = redis.call('ZRANGE', SLEEP, 0, 0, 'WITHSCORES')
if not first[1] then return false end
return tostring(math.max(0, tonumber(first[2]) - now))
"""

# ARGV: prefix. The best priority queued over every host (ready, sleeping or busy), nil if none.
BEST_PRIORITY = PRELUDE + r"""
return best_priority() or false
"""

# A worker's checks before a task, in one round trip (``CrawlRegistry.task_start``). ARGV:
# prefix, fp, token ('' = any), config key, config sha1, hosts key, robots failures key, host,
# new lease deadline ('' = keep it; the worker's heartbeat renews it from then on).
# Returns {0} if the config is gone or changed, else {1, 1 if the URL is leased (under that
# token) else 0, pages fetched from host, robots.txt failures of host}.
TASK_START = PRELUDE + r"""
local raw = redis.call('GET', ARGV[4])
if not raw or redis.sha1hex(raw) ~= ARGV[5] then return {0} end
local current = 0
local v = redis.call('HGET', LEASE, ARGV[2])
if v and (ARGV[3] == '' or ARGV[3] == parse_lease(v)) then
  current = 1
  if ARGV[9] ~= '' then redis.call('ZADD', DEADLINE, ARGV[9], ARGV[2]) end
end
local fetched = tonumber(redis.call('HGET', ARGV[6], ARGV[8]) or '0')
local failures = tonumber(redis.call('HGET', ARGV[7], ARGV[8]) or '0')
return {1, current, fetched, failures}
"""

# ARGV: prefix, fp, token ('' = any). 1 if the URL is leased (under that token), else 0.
LEASE_CURRENT = PRELUDE + r"""
local v = redis.call('HGET', LEASE, ARGV[2])
if not v then return 0 end
if ARGV[3] == '' or ARGV[3] == parse_lease(v) then return 1 end
return 0
"""

# A live worker's heartbeat (``RedisFrontier.renew``). ARGV: prefix, new deadline, then pairs of
# fp and lease token. Each URL still leased under that token gets the new deadline (later or
# earlier); a lease reaped and handed out again meanwhile is left alone. Returns how many.
RENEW = PRELUDE + r"""
local deadline, renewed = ARGV[2], 0
for i = 3, #ARGV, 2 do
  local v = redis.call('HGET', LEASE, ARGV[i])
  if v and parse_lease(v) == ARGV[i + 1] then
    redis.call('ZADD', DEADLINE, deadline, ARGV[i])
    renewed = renewed + 1
  end
end
return renewed
"""
