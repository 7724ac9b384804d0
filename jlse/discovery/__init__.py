"""Domain discovery (docs/algorithms.md §3): find the websites of a topic through a search
engine (the SearxNG JSON API) and the link graph, rank them, and hand the best to the crawl.

``engine`` runs the rounds; ``operators`` turn the current top pages into new URLs; ``search``
talks to the search engine; ``fetching`` fetches pages through the crawl's own engine;
``ranking``, ``pagerank`` and ``bandit`` rank pages and sites and choose the next operator.
"""
