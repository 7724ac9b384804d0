"""The site bandit of the default jlse strategy (models/site_harvest.py)."""

from __future__ import annotations

import numpy as np
import pytest

from jlse.models.site_harvest import (
    OFF_SITE,
    PROBES,
    PROSPECT,
    TUNNEL_OFF_SITE,
    SiteHarvest,
    is_home,
    site_of,
)
from jlse.models.strategies import LearnedTunnelling
from jlse.models.strategy_catalog import make_strategy
from jlse.models.topic_model import TopicModel, TopicSamples
from jlse.records import NewLink
from jlse.settings import Settings, SettingsError


class FixedEvidence:
    """Every link the same (sim_anchor, sim_predicted): only the site bandit tells them apart."""

    def __init__(self, sim: float) -> None:
        self.sim = sim

    def evidence(self, anchors, urls, contexts):
        return np.full(len(urls), self.sim), np.zeros(len(urls))


def crawl(sites: dict[str, tuple[int, int]], optimism: float = 0.3) -> LearnedTunnelling:
    """A jlse strategy whose crawl has written ``fetched`` pages of each site, ``relevant`` of
    them judged relevant."""
    jlse = LearnedTunnelling(FixedEvidence(0.01), site_optimism=optimism)
    for site, (fetched, relevant) in sites.items():
        for i in range(fetched):
            jlse.observe_result(f"http://{site}/p{i}", 0.99 if i < relevant else 0.01, [])
    return jlse


def score(jlse: LearnedTunnelling, page_url: str, urls: list[str],
          relevance: float = 0.99, judged: bool = False) -> np.ndarray:
    """The priorities the links of a page get once written (the page itself observed with its
    relevance when ``judged``, else not)."""
    blanks = [""] * len(urls)
    priorities, groups = jlse.score_links_and_sites(relevance, 1, blanks, urls, blanks,
                                                    page_url=page_url)
    groups = [0] * len(urls) if groups is None else groups
    links = [NewLink(url, None, 2, priority=float(p), site_group=int(g))
             for url, p, g in zip(urls, priorities, groups, strict=True)]
    jlse.observe_result(page_url, relevance if judged else None, links)
    return np.array([link.priority for link in links])


def test_a_site_with_poor_harvest_ranks_below_a_fresh_one_and_a_good_one_keeps_priority() -> None:
    jlse = crawl({"home.test": (10, 9), "poor.test": (8, 0), "good.test": (8, 8)})
    poor, fresh, good = score(jlse, "http://home.test/a",
                              ["http://poor.test/x", "http://fresh.test/y", "http://good.test/z"])
    assert good > fresh > poor
    assert poor < 0.5 * fresh
    for _ in range(50):  # many later links to the good site: its lift stays near its harvest's
        later = score(jlse, "http://home.test/a", ["http://good.test/z2"])[0]
    assert later > 0.9 * good


def test_strong_evidence_for_a_link_to_a_poor_site_is_damped_by_its_harvest() -> None:
    jlse = crawl({"home.test": (30, 27), "poor.test": (20, 0)})
    jlse.evaluator = FixedEvidence(0.8)  # e.g. a URL pattern G_w learnt on the home site
    poor, home = score(jlse, "http://home.test/a", ["http://poor.test/x", "http://home.test/b"])
    assert home == pytest.approx(0.99 * 0.8)  # a link within the page's site: its evidence
    assert poor < 0.2 * home  # 0 of 20 relevant


def test_links_within_the_pages_own_site_are_left_to_the_evidence() -> None:
    jlse = crawl({"home.test": (10, 10)})
    same = score(jlse, "http://home.test/a", ["http://home.test/b", "http://home.test/c"])
    assert same == pytest.approx([0.99 * 0.01] * 2)
    assert score(jlse, "", ["http://other.test/b"]) == pytest.approx([0.99 * 0.01])


def test_the_optimism_is_spent_on_a_sites_first_links() -> None:
    jlse = crawl({"home.test": (10, 5)})
    first = score(jlse, "http://home.test/a", ["http://new.test/1"])[0]
    later = [score(jlse, "http://home.test/a", [f"http://new.test/{i}"])[0] for i in range(2, 30)]
    assert later[-1] < first
    assert all(a >= b for a, b in zip(later, later[1:], strict=False))
    # the site's bound over the crawl's harvest (6/12), times the group's lift (no outcome
    # yet: 1/2 over 6/12); the prior of a site nobody fetched from: the share of sites entered
    # whose first page was relevant (1 of 1 here, with a uniform prior: 2/3); the 29th offer
    bound = 2 / 3 + 0.3 / np.sqrt(29)
    assert later[-1] == pytest.approx(0.99 * 0.01 * bound / 0.5 * 1.0, rel=1e-6)


def test_hub_pages_tell_the_crawls_harvest_not_their_sites() -> None:
    jlse = crawl({"home.test": (10, 9)})
    for i in range(3):  # a seed's home page and its sections, judged irrelevant
        jlse.observe_result(f"http://hubs.test/s{i}", 0.01, [], detail=False)
        jlse.observe_result(f"http://poor.test/s{i}", 0.01, [], detail=True)
    assert jlse.sites is not None and jlse.sites.crawl_harvest() == pytest.approx(10 / 18)
    hubs, fresh, poor = score(jlse, "http://home.test/a", ["http://hubs.test/x",
                                                          "http://fresh.test/y",
                                                          "http://poor.test/z"])
    assert hubs == pytest.approx(fresh)  # its articles are still to be seen
    assert poor < 0.5 * hubs


def test_irrelevant_pages_offer_nothing() -> None:
    jlse = crawl({"home.test": (3, 3)})
    assert score(jlse, "http://home.test/a", ["http://x.test/"]).tolist() != [0.0]
    hub = score(jlse, "http://home.test/h", ["http://y.test/"], relevance=0.1)
    assert hub.tolist() == [0.0]  # tunnel weight 0: the link waits, no offer spent on it
    assert jlse.sites is not None and "y.test" not in jlse.sites._offered


def test_irrelevant_pages_off_site_links_join_a_group_capped_at_its_share() -> None:
    jlse = LearnedTunnelling(FixedEvidence(0.5), site_optimism=0.3, tunnel_share=0.1,
                             link_text_relevance=lambda anchors, _contexts: [0.8] * len(anchors))
    for i in range(20):
        jlse.observe_result(f"http://home.test/p{i}", 0.99, [])
    urls = ["http://far.test/a", "http://hub.test/b"]
    priorities, groups = jlse.score_links_and_sites(0.1, 1, ["", ""], urls, ["", ""],
                                                    page_url="http://hub.test/h")
    assert priorities[0] == pytest.approx(0.8 * 0.5) and priorities[1] == 0.0
    assert groups.tolist() == [TUNNEL_OFF_SITE, 0]  # on-site links of a hub still wait at 0
    assert score(jlse, "http://hub.test/h", [f"http://far{i}.test/" for i in range(PROBES + 4)],
                 relevance=0.1).min() > 0
    assert jlse.pop_lift("http://far0.test/") == 1.0
    for i in range(PROBES + 3):  # the group's pages: past PROBES + 10% of the crawl's pages
        jlse.observe_result(f"http://far{i}.test/", 0.01, [])
    assert jlse.sites.over_share(TUNNEL_OFF_SITE, 0.1)
    assert jlse.pop_lift(f"http://far{PROBES + 3}.test/") == 0.0  # queued before: held at pop
    assert score(jlse, "http://hub.test/h", ["http://late.test/"], relevance=0.1).tolist() == [0.0]
    assert jlse.pop_lift("http://home.test/p99") == 1.0  # other links are not capped


def _entries_crawl(site_entries: bool) -> LearnedTunnelling:
    jlse = LearnedTunnelling(FixedEvidence(0.01), site_optimism=0.3, site_entries=site_entries)
    for i in range(10):
        jlse.observe_result(f"http://home.test/p{i}", 0.99 if i < 8 else 0.01, [])
    jlse.observe_result("http://old.test/p1", 0.99, [])  # a detail page: old.test is entered
    jlse.observe_result("http://hub.test/", 0.99, [], detail=False)  # a hub does not enter
    return jlse


def test_a_relevant_pages_link_to_the_home_of_a_site_not_entered_is_ranked_by_the_page() -> None:
    urls = ["http://new.test/", "http://new.test/story/1", "http://old.test/",
            "http://hub.test/index.html", "http://home.test/"]
    jlse = _entries_crawl(True)
    entries = score(jlse, "http://home.test/a", urls, judged=True).tolist()
    plain = score(_entries_crawl(False), "http://home.test/a", urls, judged=True).tolist()
    assert plain[0] < 0.05  # its evidence (a site's name) says little
    assert entries[0] > 0.5 and entries[3] > 0.5
    # the page's weight x what the bandit expects of a site not entered (no optimism)
    assert entries[0] == pytest.approx(jlse.page_weight(0.99) * jlse.sites.expected_lift("new.test"))
    assert jlse.sites.expected_lift("new.test") == pytest.approx(
        jlse.sites.new_site_harvest() / jlse.sites.crawl_harvest())
    assert entries[1:3] == plain[1:3]  # a story of the new site, the home of an entered one
    assert entries[4] == plain[4]  # the page's own site: left to the evidence
    hub = score(_entries_crawl(True), "http://home.test/b", urls, relevance=0.1, judged=True)
    assert max(hub) == 0.0  # an irrelevant page passes nothing (tunnel share 0)


def test_is_home() -> None:
    assert is_home("http://a.test/") and is_home("http://a.test") and is_home("http://a.test/index.html")
    assert not is_home("http://a.test/news/") and not is_home("http://a.test/?p=2")


def test_site_entries_are_on_by_default(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).site_entries is True
    assert make_strategy("jlse", Settings(site_entries=False), phone_model).site_entries is False


def test_the_tunnel_group_is_held_to_its_share_not_lifted_by_its_harvest() -> None:
    sites = SiteHarvest(0.3)
    for i in range(10):
        sites.observe(f"http://home.test/p{i}", True)
    sites.offer(["http://a.test/x", "http://b.test/y"], [TUNNEL_OFF_SITE, OFF_SITE])
    sites.observe("http://a.test/x", False)  # each group's first page: irrelevant
    sites.observe("http://b.test/y", False)
    crawl = sites.crawl_harvest()
    assert sites.group_harvest(TUNNEL_OFF_SITE) == sites.group_harvest(OFF_SITE) < crawl
    assert sites.group_lift(TUNNEL_OFF_SITE, crawl) == 1.0
    assert sites.group_lift(OFF_SITE, crawl) == pytest.approx(sites.group_harvest(OFF_SITE) / crawl)
    tunnel, off_site = sites.offer(["http://c.test/", "http://d.test/"], [TUNNEL_OFF_SITE, OFF_SITE])
    assert tunnel / off_site == pytest.approx(crawl / sites.group_harvest(OFF_SITE))


def _prospects_crawl(prospect_share: float) -> LearnedTunnelling:
    jlse = LearnedTunnelling(FixedEvidence(0.5), site_optimism=0.3, prospect_share=prospect_share)
    for i in range(20):
        jlse.observe_result(f"http://home.test/p{i}", 0.99, [])
    for i in range(8):  # a site whose pages so far were all off the topic
        jlse.observe_result(f"http://poor.test/p{i}", 0.01, [])
    jlse.observe_result("http://proven.test/p0", 0.99, [])
    for i in range(1, 8):  # another whose one relevant page makes it a relevant site found
        jlse.observe_result(f"http://proven.test/p{i}", 0.01, [])
    return jlse


def test_a_relevant_pages_link_to_a_site_with_no_relevant_page_is_not_lowered_by_its_harvest() -> None:
    urls = ["http://poor.test/x", "http://proven.test/x", "http://home.test/x"]
    plain = score(_prospects_crawl(0.0), "http://home.test/a", urls)
    jlse = _prospects_crawl(0.1)
    prospect, proven, home = score(jlse, "http://home.test/a", urls)
    assert plain[0] < 0.5 * prospect  # without prospects its 0 of 8 holds it down
    assert prospect == pytest.approx(0.99 * 0.5)  # its evidence x the page's weight
    assert proven == pytest.approx(plain[1])  # a relevant site found: its harvest rules
    assert proven < 0.5 * prospect
    assert home == pytest.approx(plain[2])  # the page's own site: left to the evidence
    assert jlse.sites.group_of("http://poor.test/x") == PROSPECT
    assert jlse.sites.group_of("http://proven.test/x") == OFF_SITE
    hub = score(jlse, "http://home.test/h", ["http://poor.test/y"], relevance=0.1)
    assert hub.tolist() == [0.0]  # an irrelevant page's links are no prospects


def test_a_site_is_tried_once_as_a_prospect() -> None:
    jlse = _prospects_crawl(0.1)
    first = score(jlse, "http://home.test/a", ["http://poor.test/x"])[0]
    assert score(jlse, "http://home.test/a", ["http://poor.test/y"])[0] == pytest.approx(first)
    jlse.observe_result("http://poor.test/x", 0.01, [])  # the try: off the topic again
    assert not jlse.sites.prospect("poor.test")
    again = score(jlse, "http://home.test/a", ["http://poor.test/z"])[0]
    assert again < 0.5 * first
    assert jlse.sites.group_of("http://poor.test/z") == OFF_SITE
    jlse.observe_result("http://fresh.test/x", 0.99, [])  # not tried: found, by any link
    assert not jlse.sites.prospect("fresh.test") and jlse.sites.prospect("other.test")


def test_prospects_are_held_to_their_share() -> None:
    jlse = _prospects_crawl(0.1)
    first = score(jlse, "http://home.test/a", ["http://poor.test/x"])[0]
    for i in range(PROBES + 6):  # prospects fetched, all off the topic: past PROBES + 10%
        score(jlse, "http://home.test/a", [f"http://far{i}.test/x"])
        jlse.observe_result(f"http://far{i}.test/x", 0.01, [])
    assert jlse.sites.over_share(PROSPECT, 0.1)
    later = score(jlse, "http://home.test/a", ["http://poor.test/y"])[0]
    assert later < 0.5 * first
    assert jlse.sites.group_of("http://poor.test/y") == OFF_SITE


def test_site_prospects_are_off_by_default_and_on_at_the_low_priority_share(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).prospect_share == 0.0
    on = Settings(site_prospects=True)
    assert make_strategy("jlse", on, phone_model).prospect_share == 0.1
    on.low_priority_share = 0.2
    assert make_strategy("jlse", on, phone_model).prospect_share == 0.2


def test_site_harvest_estimates() -> None:
    sites = SiteHarvest(optimism=0.0)
    assert sites.crawl_harvest() == 0.5
    for relevant in (True, True, True, False):
        sites.observe("http://a.test/x?q=1", relevant)
    assert sites.crawl_harvest() == pytest.approx(4 / 6)
    assert sites.new_site_harvest() == pytest.approx(2 / 3)
    sites.observe("http://c.test/", False)  # a site entered on an irrelevant page
    assert sites.new_site_harvest() == pytest.approx(2 / 4)
    assert sites.crawl_harvest() == pytest.approx(4 / 7)
    assert sites.harvest("a.test") == pytest.approx((3 + 1 / 2) / 5)
    lifts = sites.offer(["http://b.test/", "http://a.test/y", "http://c.test/z"], [1, 1, 1])
    group = (1 / 2) / (4 / 7)
    assert lifts == pytest.approx([(1 / 2) / (4 / 7) * group, (3.5 / 5) / (4 / 7) * group,
                                   (1 / 4) / (4 / 7) * group])
    sites.observe("http://b.test/", True)  # a ranked link fetched: its group's outcome
    assert sites.group_harvest(1) == pytest.approx(2 / 3)
    assert site_of("http://A.test:8080/x/y?z#f") == "a.test:8080"
    assert site_of("not a url") == ""


@pytest.fixture(scope="module")
def phone_model() -> TopicModel:
    samples = TopicSamples(relevant=["smartphone review battery camera phone"] * 3,
                           irrelevant=["pasta recipe tomato sauce cooking"] * 3,
                           anchors=[("phone review", 1), ("pasta recipe", 0)])
    return TopicModel().fit(samples)


def test_site_optimism_setting() -> None:
    assert Settings().site_optimism == 0.3  # on by default (docs/strategies.md, the site bandit)
    with pytest.raises(SettingsError, match="site_optimism"):
        Settings(site_optimism=1.5).validate()


def test_site_bandit_is_on_by_default_and_reaches_jlse_only(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).sites.optimism == 0.3
    assert make_strategy("jlse", Settings(site_optimism=0.5), phone_model).sites.optimism == 0.5
    assert make_strategy("jlse", Settings(site_optimism=-1), phone_model).sites is None
    assert getattr(make_strategy("jlse-paper", Settings(site_optimism=0.3), phone_model),
                   "sites", None) is None


def test_tunnel_links_are_on_by_default_and_held_to_the_low_priority_share(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).tunnel_share == 0.1
    assert make_strategy("jlse", Settings(low_priority_share=0.2), phone_model).tunnel_share == 0.2
    assert make_strategy("jlse", Settings(tunnel_off_site=False), phone_model).tunnel_share == 0.0


def test_a_links_site_group_crosses_from_a_page_process_to_the_writer() -> None:
    from jlse.records import CrawlTask
    from jlse.workers.pipeline import PageResult

    result = PageResult(CrawlTask(url="http://a.test/", url_id=1),
                        links=[NewLink("http://b.test/", 1, 1, "b", "", 0.2, 0, 0, 2),
                               NewLink("http://a.test/x", 1, 1, priority=0.4)])
    back = PageResult.from_json(result.to_json()).links
    assert [(link.priority, link.site_group) for link in back] == [(0.2, 2), (0.4, 0)]
    assert PageResult.from_json(result.to_json()).detail is None
    result.detail = False
    assert PageResult.from_json(result.to_json()).detail is False


def test_an_irrelevant_page_with_only_links_to_its_own_site_ranks_them_at_0() -> None:
    jlse = LearnedTunnelling(FixedEvidence(0.5), site_optimism=0.3, tunnel_share=0.1,
                             link_text_relevance=lambda anchors, _contexts: [0.8] * len(anchors))
    priorities, groups = jlse.score_links_and_sites(0.1, 1, ["", ""], ["http://hub.test/a",
                                                    "http://hub.test/b"], ["", ""],
                                                    page_url="http://hub.test/h")
    assert priorities.tolist() == [0.0, 0.0] and groups.tolist() == [0, 0]


def _tunnel_entries_crawl(tunnel_entries: bool) -> LearnedTunnelling:
    jlse = LearnedTunnelling(FixedEvidence(0.01), site_optimism=0.3, tunnel_share=0.5,
                             link_text_relevance=lambda anchors, contexts: np.full(len(anchors), 0.1),
                             tunnel_entries=tunnel_entries)
    for i in range(10):  # the tunnel group has led to 4 relevant pages of 10
        url = f"http://via{i}.test/p"
        jlse.sites.offer([url], [TUNNEL_OFF_SITE])
        jlse.observe_result(url, 0.99 if i < 4 else 0.01, [], detail=True)
    jlse.observe_result("http://known.test/p1", 0.99, [], detail=True)  # known.test entered
    return jlse


def test_an_irrelevant_pages_link_to_the_home_of_a_site_not_entered_is_ranked_by_its_group() -> None:
    urls = ["http://fresh.test/", "http://known.test/", "http://fresh.test/story-1.html"]
    entering = score(_tunnel_entries_crawl(True), "http://portal.test/a", urls, relevance=0.01,
                     judged=True)
    plain = score(_tunnel_entries_crawl(False), "http://portal.test/a", urls, relevance=0.01,
                  judged=True)
    tunnels = _tunnel_entries_crawl(True)
    expected = tunnels.sites.group_harvest(TUNNEL_OFF_SITE) * tunnels.sites.expected_lift("fresh.test")
    assert entering[0] == pytest.approx(expected, rel=0.1) and entering[0] > 10 * plain[0]
    assert entering[1] == pytest.approx(plain[1]) and entering[2] == pytest.approx(plain[2])


def test_tunnel_entries_are_on_by_default(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).tunnel_entries is True
    assert make_strategy("jlse", Settings(tunnel_entries=False), phone_model).tunnel_entries is False


def _discovery_crawl(on: bool) -> LearnedTunnelling:
    """A crawl of 20 relevant pages of home.test, then a relevant portal page whose link led
    to new.test's first relevant page."""
    jlse = LearnedTunnelling(FixedEvidence(0.1), site_optimism=0.3, site_discovery=on)
    for i in range(20):
        jlse.observe_result(f"http://home.test/p{i}", 0.99, [])
    score(jlse, "http://portal.test/a", ["http://new.test/x"], judged=True)
    jlse.observe_result("http://new.test/x", 0.99, [])
    return jlse


def test_a_site_whose_page_led_to_a_new_relevant_site_has_its_relevant_pages_links_lifted() -> None:
    jlse = _discovery_crawl(True)
    # portal.test: 1 new site per 1 page (+1); the crawl: 1 per 22 pages
    assert jlse.sites.discovery_lift("portal.test") == pytest.approx((0.5 * 22) ** 0.5)
    assert jlse.sites.discovery_lift("home.test") == 1.0  # no new site from it: never lowered
    urls = ["http://portal.test/b", "http://home.test/x"]
    lifted = score(jlse, "http://portal.test/c", urls, judged=True)
    plain = score(_discovery_crawl(False), "http://portal.test/c", urls, judged=True)
    lift = jlse.sites.discovery_lift("portal.test")  # 1 per 2 pages (+1) now
    assert lift == pytest.approx((22 / 3 * 23 / 22) ** 0.5)
    assert lifted.tolist() == pytest.approx((plain * lift).tolist())  # its own site's too
    irrelevant = score(jlse, "http://portal.test/d", urls, relevance=0.1, judged=True)
    assert max(irrelevant) == 0.0  # an irrelevant page's links are not lifted


def test_only_a_sites_first_relevant_page_reached_by_a_link_credits_the_linking_site() -> None:
    jlse = _discovery_crawl(True)
    score(jlse, "http://portal.test/a", ["http://new.test/y", "http://off.test/x"])
    jlse.observe_result("http://new.test/y", 0.99, [])  # new.test was found already
    jlse.observe_result("http://off.test/x", 0.01, [])  # off the topic: no site found
    # still one site credited to portal.test's one page (+1), now of the crawl's 24 pages
    assert jlse.sites.discovery_lift("portal.test") == pytest.approx((0.5 * 24) ** 0.5)
    jlse.observe_result("http://seed.test/", 0.99, [])  # reached by no ranked link
    assert jlse.sites.discovery_lift("seed.test") == 1.0
    plain = _discovery_crawl(False)
    assert plain.sites.discovery_lift("portal.test") == 1.0  # off: nothing credited


def test_site_discovery_is_off_by_default(phone_model) -> None:
    assert make_strategy("jlse", Settings(), phone_model).site_discovery is False
    assert make_strategy("jlse", Settings(site_discovery=True), phone_model).site_discovery is True
