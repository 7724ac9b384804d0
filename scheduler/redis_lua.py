"""The Lua functions every frontier script shares (``PRELUDE``), and the encodings they use.

Each script of ``scheduler.redis_scripts`` is ``PRELUDE`` plus its own body: the prelude names
the keys under the prefix (ARGV[1]) and defines the steps (enqueue, spill, pop, lease, reap...).
See ``scheduler.redis_frontier`` for the key layout and ``scheduler.redis_scripts`` for the
encodings.
"""

from __future__ import annotations

from jlse.scheduler.frontier import FAR_SKIPS

PRELUDE = r"""
local P = ARGV[1]
local READY, WORST, QUEUED = P .. 'ready', P .. 'worst', P .. 'queued'
local SLEEP, BUSY, LEASE, DEADLINE = P .. 'sleep', P .. 'busy', P .. 'lease', P .. 'deadline'
local SEQ, EVICTED, SEEN_COUNT = P .. 'seq', P .. 'evicted', P .. 'seen_count'
local BEST, LEASE_PRIORITY, WAKE = P .. 'best', P .. 'lease_priority', P .. 'wake'
local RECENT, RECENT_COUNT = P .. 'recent', P .. 'recent_count'
local DOMAIN = P .. 'domain'
local SPILL, REFILL, DONE = P .. 'spill', P .. 'refill', P .. 'done'
local FAR_SKIPS = @FAR_SKIPS@  -- ``frontier.FAR_SKIPS``: see best_priority
local DONE_SECONDS = 300  -- how long a finished URL is remembered (see REFILL_PUSH)
local REFILL_RETRY = 5  -- seconds before a host whose refill found nothing new is due again
-- the frontier's limits, set by each script that queues URLs (``set_limits``): URLs queued in
-- the shard at most, and URLs per host (0: no limit) before the lowest spill to the database
local MAX_SIZE, WINDOW = math.huge, 0
local function set_limits(max_size, window)
  MAX_SIZE, WINDOW = tonumber(max_size), tonumber(window)
end

-- the registered domain of a host (domain diversity), as PUSH recorded it
local function domain_of(host) return redis.call('HGET', DOMAIN, host) or host end

local function qkey(host) return P .. 'q:' .. host end
local function tkey(host) return P .. 't:' .. host end

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
      redis.call('HDEL', DOMAIN, host)  -- a push sets it again: the hash holds hosts with URLs
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

-- a URL of host leaves Redis but stays queued in the crawl database: counted, so it comes back
local function spill(host)
  redis.call('HINCRBY', SPILL, host, 1)
  redis.call('INCR', EVICTED)
end

-- a host whose window ran low while some of its URLs wait in the crawl database is due a
-- refill (``REFILL_CLAIM``); a host already listed (due or claimed) keeps its entry
local function maybe_refill(host, q)
  if WINDOW > 0 and redis.call('ZCARD', q) * 2 > WINDOW then return end
  if redis.call('HEXISTS', SPILL, host) == 1 then redis.call('ZADD', REFILL, 'NX', 0, host) end
end

-- remove a queued member (pfx .. fp) of host's queue q (call reindex afterwards)
local function unqueue(host, q, member)
  redis.call('ZREM', q, member)
  redis.call('HDEL', tkey(host), string.sub(member, 7))
  redis.call('DECR', QUEUED)
end

local function evict_lowest()
  local lowest = redis.call('ZRANGE', WORST, 0, 0)[1]
  if not lowest then return end
  local host = string.sub(lowest, 7)
  local q = qkey(host)
  local top, bottom = top_of(q), bottom_of(q)
  unqueue(host, q, bottom[1])
  spill(host)
  reindex(host, q, top, bottom)
  maybe_refill(host, q)
end

-- queue a URL, or raise its priority if it is queued; pfx keeps a returned lease's order. A
-- host holds at most window URLs (0: no limit): beyond it the lowest (among equals the latest
-- discovered) is spilled to the crawl database (MAX_SIZE, WINDOW: ``set_limits``). With
-- queued_only, only a URL already queued is touched (raised). Returns 1 if queued, raised or
-- spilled.
local function enqueue(host, fp, score, body, pfx, queued_only)
  local q, t = qkey(host), tkey(host)
  local current = redis.call('HGET', t, fp)
  if queued_only and not current then return 0 end
  if current then
    pfx = string.sub(current, 1, 6)
    local old = redis.call('ZSCORE', q, pfx .. fp)
    if not old or tonumber(old) >= tonumber(score) then return 0 end
  end
  local top, bottom = top_of(q), bottom_of(q)
  if not current and WINDOW > 0 and bottom and redis.call('ZCARD', q) >= WINDOW then
    if tonumber(score) <= tonumber(bottom[2]) then
      spill(host)
      return 1
    end
    unqueue(host, q, bottom[1])
    spill(host)
  end
  if not pfx then pfx = seq_prefix(redis.call('INCR', SEQ)) end
  redis.call('ZADD', q, score, pfx .. fp)
  redis.call('HSET', t, fp, pfx .. body)
  if not current and redis.call('INCR', QUEUED) > MAX_SIZE then
    reindex(host, q, top, bottom)
    evict_lowest()
    return 1
  end
  reindex(host, q, top, bottom)
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

-- end a lease; with requeue the URL goes back to its host queue in its old place, else it is
-- remembered as done for DONE_SECONDS (a refill must not queue it again: see REFILL_PUSH)
local function end_lease(fp, v, requeue, ready_at, now, body)
  local _, host, score, stored = parse_lease(v)
  redis.call('HDEL', LEASE, fp)
  redis.call('ZREM', DEADLINE, fp)
  redis.call('ZREM', LEASE_PRIORITY, fp)
  if requeue then
    if not body or body == '' then body = string.sub(stored, 7) end
    enqueue(host, fp, score, body, string.sub(stored, 1, 6))
  else
    redis.call('ZADD', DONE, now, fp)
    redis.call('ZREMRANGEBYSCORE', DONE, '-inf', '(' .. string.format('%.17g', now - DONE_SECONDS))
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
  local domain = domain_of(host)
  local q = qkey(host)
  local top, bottom = top_of(q), bottom_of(q)
  if not top then return nil end
  local fp = string.sub(top[1], 7)
  local stored = redis.call('HGET', tkey(host), fp)
  if not stored then  -- Redis lost the URL's task (a partial data loss): refilled from the database
    unqueue(host, q, top[1])
    spill(host)
    redis.call('ZADD', READY, top[2], host_entry(top, host))  -- as listed: reindex moves it
    reindex(host, q, top, bottom)
    maybe_refill(host, q)
    return pop_one(now, lease_seconds, min, diversity, slack)
  end
  unqueue(host, q, top[1])
  reindex(host, q, top, bottom)
  maybe_refill(host, q)
  redis.call('SADD', BUSY, host)
  remember_host(domain, diversity)
  local token = string.format('%d', redis.call('INCR', SEQ))
  redis.call('HSET', LEASE, fp, token .. '\t' .. host .. '\t' .. top[2] .. '\t' .. stored)
  redis.call('ZADD', DEADLINE, now + lease_seconds, fp)
  redis.call('ZADD', LEASE_PRIORITY, top[2], fp)
  return stored, token, top[2]
end

-- return up to batch expired leases to their host queues; how many deadlines were due
local function reap_due(now, delay, batch)
  local due = redis.call('ZRANGEBYSCORE', DEADLINE, '-inf', now, 'LIMIT', 0, batch)
  for _, fp in ipairs(due) do
    local v = redis.call('HGET', LEASE, fp)
    if v then
      end_lease(fp, v, true, now + delay, now)
    else
      redis.call('ZREM', DEADLINE, fp)
      redis.call('ZREM', LEASE_PRIORITY, fp)
    end
  end
  return #due
end

-- the best priority queued as a string, nil if none: over every host (ready, sleeping or busy),
-- or with horizon over the hosts that may be contacted within horizon seconds of now (ready,
-- busy, or sleeping until then; call promote(now) first). That walks BEST best first past at
-- most FAR_SKIPS hosts that sleep longer; past them, the best ready host counts
-- (``LocalFrontier.best_priority`` walks alike). BEST holds exactly the hosts of WORST; a
-- frontier written before BEST existed (fewer members) gets it built here once.
local function best_priority(now, horizon)
  if redis.call('ZCARD', BEST) ~= redis.call('ZCARD', WORST) then
    redis.call('DEL', BEST)
    for _, entry in ipairs(redis.call('ZRANGE', WORST, 0, -1)) do
      local host = string.sub(entry, 7)
      local top = top_of(qkey(host))
      if top then redis.call('ZADD', BEST, top[2], host) end
    end
  end
  if not horizon then return redis.call('ZREVRANGE', BEST, 0, 0, 'WITHSCORES')[2] end
  local by = now + horizon
  local top = redis.call('ZREVRANGE', BEST, 0, FAR_SKIPS - 1, 'WITHSCORES')
  for i = 1, #top, 2 do
    local wake = redis.call('ZSCORE', SLEEP, top[i])
    if not wake or tonumber(wake) <= by then return top[i + 1] end
  end
  return redis.call('ZREVRANGE', READY, 0, 0, 'WITHSCORES')[2]
end
""".replace("@FAR_SKIPS@", str(FAR_SKIPS))
