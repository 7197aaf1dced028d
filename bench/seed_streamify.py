"""The streamify thread's published tables beside the model's (one run, ratios printed).

Usage: ``python bench/seed_streamify.py [--json PATH] [--plot DIR] [--table KEY] [--jobs N]``
"""

from __future__ import annotations

import sys

from _cli import seed_script

if __name__ == "__main__":
    sys.exit(seed_script("streamify"))
