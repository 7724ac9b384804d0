"""``python -m jlse.sandbox.realweb``: fetch and cache the 20 Newsgroups corpus (``make corpus``)."""

import sys

from jlse.sandbox.realweb.corpus import main

sys.exit(main())
