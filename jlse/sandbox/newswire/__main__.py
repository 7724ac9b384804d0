"""``python -m jlse.sandbox.newswire``: fetch and cache the Reuters-21578 stories (``make corpus``)."""

import sys

from jlse.sandbox.newswire.corpus import main

sys.exit(main())
