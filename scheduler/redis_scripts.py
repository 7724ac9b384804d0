"""Lua sources of the Redis frontier (see ``scheduler.redis_frontier`` for the key layout).

Every script gets the key prefix as ARGV[1] and declares one key, ``prefix .. 'ready'`` (KEYS[1]):
a Redis Cluster routes the call by it. Every key a script touches starts with the prefix, and a
sharded crawl's prefix carries a hash tag (``scheduler.shards``), so all of them sit in one slot;
the scripts run unchanged on one Redis and on a cluster. "now" (when a script needs a time)
comes from the caller's clock, never from TIME, so tests control time. Each script is one atomic
step.

Encodings used here:
- ``pfx``: 6 bytes, ``2^48 - 1 - seq`` big-endian, where ``seq`` is the URL's discovery number.
  Zset members with equal scores sort by bytes, so among equal priorities the *largest* member
  (``ZREVRANGE``) is the earliest discovered and the smallest (``ZRANGE``) the latest.
- host queue member: ``pfx .. fp`` (fp = the URL's 8-byte fingerprint); score = priority.
- ready / worst member: ``pfx .. host`` of the host's best / lowest URL; score = its priority.
- best member: ``host``; score = the priority of the host's best URL (every host with URLs).
- lease_priority member: ``fp`` of a leased URL; score = its priority.
- task value (the host's ``t:`` hash, fp -> it): ``pfx .. json``; lease value:
  ``token TAB host TAB score TAB pfx .. json``.
- spill: host -> URLs of the host that went to the crawl database only (its window was full, or
  the frontier was); refill member: host whose spilled URLs should come back, score = when it may
  be claimed (0: now; a claim sets its deadline).
"""

from __future__ import annotations

from jlse.scheduler.redis_lua import PRELUDE

# ARGV: prefix, max_size, window, dedup ('1' = add_new), then per URL: host, its registered
# domain, fp, score, body [, seen shard, seen value]. Returns 1/0 per URL (added or raised).
PUSH = PRELUDE + r"""
set_limits(ARGV[2], ARGV[3])
local dedup = ARGV[4] == '1'
local step = 5
if dedup then step = 7 end
local results = {}
for i = 5, #ARGV, step do
  local host, fp, score, body = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local added = 0
  if not dedup then
    added = enqueue(host, fp, score, body, nil)
  elseif redis.call('SADD', P .. 'seen:' .. ARGV[i + 5], ARGV[i + 6]) == 1 then
    redis.call('INCR', SEEN_COUNT)
    added = enqueue(host, fp, score, body, nil)
  else  -- seen: raised if still queued (enqueue finds it), else nothing
    added = enqueue(host, fp, score, body, nil, true)
  end
  if added == 1 and ARGV[i + 1] ~= host then redis.call('HSETNX', DOMAIN, host, ARGV[i + 1]) end
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

# ARGV: prefix, now, lease seconds, min priority ('' = any), domain diversity, slack, max_size,
# window. Returns {json, token} or nil (nil too when the best ready URL is below the min
# priority: then every ready URL is).
POP = PRELUDE + r"""
local now = tonumber(ARGV[2])
set_limits(ARGV[7], ARGV[8])
promote(now)
local stored, token = pop_one(now, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
                              tonumber(ARGV[6]))
if not stored then return false end
return {string.sub(stored, 7), token}
"""

# ARGV: prefix, now. The best ready priority (as a string) after promoting the hosts whose
# delay has passed, nil if no host is ready (``ShardedFrontier.pop`` compares shards by it).
READY_BEST = PRELUDE + r"""
promote(tonumber(ARGV[2]))
return redis.call('ZREVRANGE', READY, 0, 0, 'WITHSCORES')[2] or false
"""

# A shard's figures for the start of a round (``dispatch_shards.read_figures``): ARGV: prefix,
# now, counters key, low bound ('' = none), top, priority slack, low top, horizon. Promotes the
# hosts whose delay ended, then returns {fetched, in flight, queued, hosts with spilled URLs, best
# queued priority at the hosts that may go within horizon seconds (``best_priority``; '' =
# none), URLs in flight below the low bound, then the priorities of the
# best ``top`` ready hosts, best first, but of those below priority slack x this shard's best
# only the first ``low top``}. The round's low bound (priority slack x the crawl's best) is at
# least that, so every URL the round may take as not low is there; of the low ones the round
# takes at most the crawl's low slots (low top is one more: the best one a shard leaves).
FIGURES = PRELUDE + r"""
promote(tonumber(ARGV[2]))
local low = 0
if ARGV[4] ~= '' then low = redis.call('ZCOUNT', LEASE_PRIORITY, '-inf', '(' .. ARGV[4]) end
local reply = {redis.call('HGET', ARGV[3], 'fetched') or '0', redis.call('HLEN', LEASE),
               redis.call('GET', QUEUED) or '0', redis.call('HLEN', SPILL),
               best_priority(tonumber(ARGV[2]), tonumber(ARGV[8])) or '', low}
local top = tonumber(ARGV[5])
if top > 0 and reply[5] ~= '' then
  local bound = string.format('%.17g', tonumber(ARGV[6]) * tonumber(reply[5]))
  top = math.min(top, redis.call('ZCOUNT', READY, bound, '+inf') + tonumber(ARGV[7]))
end
if top > 0 then
  local ready = redis.call('ZREVRANGE', READY, 0, top - 1, 'WITHSCORES')
  for i = 2, #ready, 2 do reply[#reply + 1] = ready[i] end
end
return reply
"""

# Indexes of DISPATCH's arguments, named (``Dispatcher._dispatch`` builds them in this order).
DISPATCH_ARGS = (
    "prefix", "now", "lease_seconds", "counters", "state", "config_sha1", "max_pages",
    "max_in_flight", "priority_slack", "low_slots", "reap_batch", "reap_delay", "max_size",
    "window", "elsewhere", "low_share", "diversity", "diversity_slack", "low_after_idle",
    "crawl_best", "low_elsewhere", "floor", "max_pops", "min_pops", "batch_wait",
    "in_flight_elsewhere")

# One dispatcher round of one shard of a crawl (``Dispatcher``); arguments as DISPATCH_ARGS:
# counters = the shard's counters hash, state = the shard's state hash (``active``, ``sha1`` of
# the crawl's config), reap batch 0 = no reap, elsewhere = pages fetched or in flight in the
# crawl's other shards (the page budget is the crawl's), low share: low pops at most this share
# of all pops (P .. 'started' and 'low_started' count them), domain diversity and its slack (each
# pop follows ``pick_ready``'s rule, as ``POP``), low after idle (seconds without a pop after
# which a low one may go anyway: P .. 'last_start'; also the horizon of the best priority: hosts
# sleeping longer do not count, see ``best_priority``), crawl best = the best priority queued in
# the crawl's other shards, so counted ('' = none: a URL is low below priority_slack x the best
# of the whole crawl), low elsewhere = low URLs in flight in the other shards (low slots are
# the crawl's),
# floor = no pop below this priority in this call ('' = none), max pops = at most this many
# pops in this call ('' = no bound beyond max in flight and the budget): the shard's share of
# the crawl's best ready URLs (``dispatch_shards``), min pops = hold the pops back while fewer
# than this many (or than the budget left, if fewer) could be made (free slots, the shard's
# share or its ready hosts), until batch wait seconds passed since a round first held them
# (P .. 'held_since'); until then pop a multiple of it (0 = no hold: pop what can be popped);
# no hold either while the crawl has fewer than min pops in flight (in flight elsewhere: the
# other shards'), as nothing may come to free the slots.
# Returns {-1} when the crawl is no longer
# active, {0} when its config changed (nothing done in either case), else {1, fetched, in
# flight, queued, reaped, seconds until the next sleeping host wakes ('' = none), hosts with
# spilled URLs, hosts due a refill, the best ready priority left ('' = none), its URLs in
# flight below the low bound, seconds until a hold ends ('' = none), then json, token
# per leased URL}. The pops follow the
# low-priority slots rule as ``Dispatcher`` documents it, with the bound taken once per round.
_DISPATCH_NAMES = ", ".join(f"'{name}'" for name in DISPATCH_ARGS)
DISPATCH = PRELUDE + f"local DISPATCH_ARGS = {{{_DISPATCH_NAMES}}}\n" + r"""
local A = {}
for i, name in ipairs(DISPATCH_ARGS) do A[name] = ARGV[i] end
local now, lease_seconds = tonumber(A.now), tonumber(A.lease_seconds)
if redis.call('HGET', A.state, 'active') ~= '1' then return {-1} end
if redis.call('HGET', A.state, 'sha1') ~= A.config_sha1 then return {0} end
set_limits(A.max_size, A.window)
redis.call('DEL', WAKE)
local reaped = 0
if tonumber(A.reap_batch) > 0 then
  reaped = reap_due(now, tonumber(A.reap_delay), tonumber(A.reap_batch))
end
local fetched = tonumber(redis.call('HGET', A.counters, 'fetched') or '0')
local in_flight = redis.call('HLEN', LEASE)
local budget = tonumber(A.max_pages) - fetched - in_flight - tonumber(A.elsewhere)
local max_in_flight, low_slots = tonumber(A.max_in_flight), tonumber(A.low_slots)
promote(now)
local best, low_below, low_in_flight = best_priority(now, tonumber(A.low_after_idle)), nil, 0
if A.crawl_best ~= '' and (not best or tonumber(A.crawl_best) > tonumber(best)) then
  best = A.crawl_best  -- "low" is below the crawl's best URL, not this shard's
end
local low_share = tonumber(A.low_share)
local diversity, slack = tonumber(A.diversity), tonumber(A.diversity_slack)
local low_after_idle = tonumber(A.low_after_idle)
local floor = tonumber(A.floor)  -- nil: none; else no pop below it this call (see Dispatcher)
local started = tonumber(redis.call('GET', P .. 'started') or '0')
local low_started = tonumber(redis.call('GET', P .. 'low_started') or '0')
local last_start = tonumber(redis.call('GET', P .. 'last_start') or '0')
if best then
  low_below = tonumber(A.priority_slack) * tonumber(best)
  low_in_flight = redis.call('ZCOUNT', LEASE_PRIORITY, '-inf',
                             '(' .. string.format('%.17g', low_below)) + tonumber(A.low_elsewhere)
end
local out = {}
local pops_left = tonumber(A.max_pops) or math.huge
local min_pops, hold_in = tonumber(A.min_pops), ''
local target = math.min(min_pops, budget)  -- the budget's last pages: one message
if target > 1 and in_flight + tonumber(A.in_flight_elsewhere) >= min_pops then
  local can = math.min(max_in_flight - in_flight, pops_left, redis.call('ZCARD', READY))
  local since = tonumber(redis.call('GET', P .. 'held_since') or '')
  if can > 0 and not since then since = now end
  if can > 0 and now - since < tonumber(A.batch_wait) then
    pops_left = math.min(pops_left, can - can % target)
    if pops_left == 0 then
      redis.call('SET', P .. 'held_since', string.format('%.17g', since))
      hold_in = string.format('%.17g', since + tonumber(A.batch_wait) - now)
    end
  end
end
while in_flight < max_in_flight and budget > 0 and pops_left > 0 do
  local min = nil
  local low_spent = low_started >= low_share * (started + 1)
                    and now - last_start < low_after_idle
  if low_below and (low_in_flight >= low_slots or low_spent) then min = low_below end
  if floor and (not min or floor > min) then min = floor end
  local stored, token, score = pop_one(now, lease_seconds, min, diversity, slack)
  if not stored then break end
  out[#out + 1] = string.sub(stored, 7)
  out[#out + 1] = token
  in_flight, budget, pops_left = in_flight + 1, budget - 1, pops_left - 1
  started, last_start = started + 1, now
  if low_below and tonumber(score) < low_below then
    low_in_flight, low_started = low_in_flight + 1, low_started + 1
  end
end
if #out > 0 and min_pops > 0 then redis.call('DEL', P .. 'held_since') end
if #out > 0 then
  redis.call('MSET', P .. 'started', started, P .. 'low_started', low_started,
             P .. 'last_start', string.format('%.17g', last_start))
end
local ready_in = ''
local first = redis.call('ZRANGE', SLEEP, 0, 0, 'WITHSCORES')
if first[1] then ready_in = string.format('%.17g', math.max(0, tonumber(first[2]) - now)) end
local queued = tonumber(redis.call('GET', QUEUED) or '0')
local low_here = low_in_flight - tonumber(A.low_elsewhere)
if not low_below then low_here = 0 end
local reply = {1, fetched, in_flight, queued, reaped, ready_in, redis.call('HLEN', SPILL),
               redis.call('ZCOUNT', REFILL, '-inf', now),
               redis.call('ZREVRANGE', READY, 0, 0, 'WITHSCORES')[2] or '', low_here, hold_in}
for _, item in ipairs(out) do reply[#reply + 1] = item end
return reply
"""

# ARGV: prefix, now, fp, token ('' = any), seconds until the host is ready, requeue ('1'/'0'),
# max_size, window, counters key ('' = none), the task's JSON to queue again ('' = as leased),
# then pairs (counter, delta). Returns {0} if the lease is gone (reaped) or belongs to a later
# pop: nothing is done, the counters are left alone too (the live lease's holder counts the
# URL). Else the lease ends, the deltas are added and a token is left in WAKE for the
# dispatcher: {1, the new value of each counter}.
FINISH = PRELUDE + r"""
local now = tonumber(ARGV[2])
local v = redis.call('HGET', LEASE, ARGV[3])
if not v then return {0} end
local token = parse_lease(v)
if ARGV[4] ~= '' and ARGV[4] ~= token then return {0} end
set_limits(ARGV[7], ARGV[8])
end_lease(ARGV[3], v, ARGV[6] == '1', now + tonumber(ARGV[5]), now, ARGV[10])
if redis.call('LLEN', WAKE) == 0 then redis.call('RPUSH', WAKE, '1') end
local reply = {1}
if ARGV[9] ~= '' then
  for i = 11, #ARGV, 2 do
    reply[#reply + 1] = redis.call('HINCRBY', ARGV[9], ARGV[i], ARGV[i + 1])
  end
end
return reply
"""

# ARGV: prefix, now, seconds until the host is ready, max_size, window, batch. Returns leases
# returned.
REAP = PRELUDE + r"""
set_limits(ARGV[4], ARGV[5])
return reap_due(tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[6]))
"""

# ARGV: prefix, now, claim seconds, how many hosts, max_size, window. Claims up to that many
# hosts due a refill (their entries wait claim seconds before another claim: a refiller that
# dies loses nothing) while the shard has room for a window more: {host, spilled count, ...}.
REFILL_CLAIM = PRELUDE + r"""
local now = tonumber(ARGV[2])
set_limits(ARGV[5], ARGV[6])
local queued = tonumber(redis.call('GET', QUEUED) or '0')
if queued + math.max(WINDOW, 1) > MAX_SIZE then return {} end
local due = redis.call('ZRANGEBYSCORE', REFILL, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local reply = {}
for _, host in ipairs(due) do
  redis.call('ZADD', REFILL, now + tonumber(ARGV[3]), host)
  reply[#reply + 1] = host
  reply[#reply + 1] = redis.call('HGET', SPILL, host) or '0'
end
return reply
"""

# A refill of one host from the crawl database (``RedisFrontier.refill``). ARGV: prefix, now,
# max_size, window, host, its registered domain, the spilled count its claim saw, complete ('1':
# the database had no more queued URLs of the host than these), then per URL, best first: fp,
# score, body. URLs are taken until the host's window is full; one leased or finished lately is
# skipped (the database may not show its fetch yet). Then the host leaves the refill set, and
# if every URL was taken and the database had no more, its spill count too, unless URLs spilled
# since the claim (then it is due again). A refill that found only skipped URLs is due again in
# REFILL_RETRY seconds. Returns how many were queued.
REFILL_PUSH = PRELUDE + r"""
local now = tonumber(ARGV[2])
set_limits(ARGV[3], ARGV[4])
local host = ARGV[5]
local q, t = qkey(host), tkey(host)
if ARGV[6] ~= host then redis.call('HSETNX', DOMAIN, host, ARGV[6]) end
local room = math.huge
if WINDOW > 0 then room = WINDOW - redis.call('ZCARD', q) end
local queued, taken = 0, 0
for i = 9, #ARGV, 3 do
  if room <= 0 then break end
  local fp = ARGV[i]
  taken = taken + 1
  if redis.call('HEXISTS', LEASE, fp) == 0 and not redis.call('ZSCORE', DONE, fp) then
    if redis.call('HEXISTS', t, fp) == 0 then room = room - 1 end
    queued = queued + enqueue(host, fp, ARGV[i + 1], ARGV[i + 2], nil)
  end
end
redis.call('ZREM', REFILL, host)
if ARGV[8] == '1' and taken == (#ARGV - 8) / 3 then
  if (redis.call('HGET', SPILL, host) or '0') == ARGV[7] then
    redis.call('HDEL', SPILL, host)
  else
    redis.call('ZADD', REFILL, 0, host)
  end
elseif queued == 0 then
  redis.call('ZADD', REFILL, now + REFILL_RETRY, host)
else
  maybe_refill(host, q)
end
return queued
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

# ARGV: prefix [, now, horizon]. The best priority queued over every host (ready, sleeping or
# busy), or with a horizon over the hosts that may go within it (``best_priority``), nil if none.
BEST_PRIORITY = PRELUDE + r"""
local now, horizon = tonumber(ARGV[2]), tonumber(ARGV[3])
if horizon then promote(now) end
return best_priority(now, horizon) or false
"""

# A worker's checks before a task, in one round trip (``CrawlRegistry.task_start``). ARGV:
# prefix, fp, token ('' = any), the shard's state key, config sha1, hosts key, robots failures
# key, host, new lease deadline ('' = keep it; the worker's heartbeat renews it from then on).
# Returns {0} if the config is gone or changed, else {1, 1 if the URL is leased (under that
# token) else 0, pages fetched from host, robots.txt failures of host}.
TASK_START = PRELUDE + r"""
if redis.call('HGET', ARGV[4], 'sha1') ~= ARGV[5] then return {0} end
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
