"""The meson fragment and the CI recipe in examples/ name options that exist (no tree needed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _help(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", *args, "--help"], capture_output=True, text=True, check=False)
    return out.stdout


def test_the_meson_fragment_runs_the_tap_module_with_known_options() -> None:
    text = (ROOT / "examples/meson/readstream/meson.build").read_text()
    assert "protocol: 'tap'" in text and "'-m', 'pytest_readstream.tap'" in text
    options = set(re.findall(r"'(--readstream-[\w-]+)", text))
    assert {"--readstream-impl", "--readstream-pg-bindir", "--readstream-pg-source"} <= options
    known = _help("pytest", "-p", "pytest_readstream.tap")
    assert all(o in known for o in options), options


def test_the_ci_recipe_uses_review_options_that_exist() -> None:
    text = (ROOT / "examples/ci/readstream-review.yml").read_text()
    review = " ".join(re.findall(r"readstream review (.*?)(?:\|\||$)", text.replace("\\\n", " "), re.M))
    used = set(re.findall(r"(--[\w-]+)", review))
    assert {"--base", "--patched", "--json", "--markdown", "--plot-dir"} <= used
    known = _help("pytest_readstream.cli", "review")
    assert all(o in known for o in used), used
    assert "python -m pytest_readstream.tap" in text and "upload-artifact" in text
