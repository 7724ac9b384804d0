"""Which other sites a page links to: partners, portals, adverts and hub picks.

The rules that make the delayed-benefit structure: topical sites link to their non-hidden
same-topic partners, to two hubs and to distractor adverts; only hub pages link to the hidden
topical sites.
"""

from __future__ import annotations

import random

from jlse.sandbox.generator import SitePlan, WebPlan


def partners(web: WebPlan, plan: SitePlan) -> list[tuple[str, str]]:
    """(home URL, name) of the other non-hidden sites of the same topic (none for long-tail
    sites), then of the sites ``web.extra_links`` gives this one."""
    own = [] if plan.spec.longtail else web.of_topic(plan.spec.topic, include_hidden=False)
    others = [web.by_host[host] for host in web.extra_links.get(plan.host, ())]
    return [(other.url("/"), other.spec.name) for other in own + others if other is not plan]


def portals(web: WebPlan, plan: SitePlan) -> list[tuple[str, str]]:
    """Two hub home pages, fixed per site; none for long-tail sites."""
    if plan.spec.longtail:
        return []
    hubs = [hub for hub in web.hubs if hub is not plan]
    start = web.sites.index(plan)
    chosen = [hubs[start % len(hubs)], hubs[(start + 2) % len(hubs)]]
    return [(hub.url("/"), hub.spec.name) for hub in chosen]


def item_link(plan: SitePlan, item_id: int) -> str:
    """The URL other pages use for an item: through ``/go/<id>`` (a 301) on "go" sites."""
    if "go" in plan.spec.features:
        return plan.url(f"/go/{item_id}")
    return plan.detail_url(item_id)


def random_item(plan: SitePlan, rng: random.Random) -> tuple[str, str]:
    item_id = rng.choice(list(plan.items))
    return item_link(plan, item_id), plan.items[item_id].name


def ads(web: WebPlan, plan: SitePlan, rng: random.Random, count: int = 3) -> list[tuple[str, str]]:
    """(URL, anchor) adverts for detail pages of distractor sites of another topic."""
    pool = [d for d in web.distractors if d.spec.topic != plan.spec.topic]
    return [random_item(rng.choice(pool), rng) for _ in range(count)]


def topic_picks(web: WebPlan, topic: str, rng: random.Random,
                count: int) -> list[tuple[str, str]]:
    """(URL, anchor) links a hub gives to a topic's sites, hidden ones included."""
    sites = web.of_topic(topic)
    picks = []
    for _ in range(count):
        site = rng.choice(sites)
        if rng.random() < 0.25:
            picks.append((site.url("/"), site.spec.name))
        else:
            picks.append(random_item(site, rng))
    return picks
