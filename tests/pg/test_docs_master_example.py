"""docs/postgres.md's worked example for a master tree runs as written (issue 24, must-show 5).

Opt-in: it builds PostgreSQL (about 12 minutes on two cores the first time, then cached by the
tree's content) and runs the whole conformance suite against it, so it runs only when
``READSTREAM_PG_SOURCE`` names a master (20devel) source tree, e.g. one extracted from the
``postgresql-20devel`` tarball; otherwise it skips with that reason. CI gives none.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"
ENV = "READSTREAM_PG_SOURCE"
_BLOCK = re.compile(r"<!-- worked-example: master -->\s*```sh\n(.*?)```\s*<!-- /worked-example -->", re.S)


def worked_example() -> str:
    """The shell block of the worked example, exactly as the docs print it."""
    found = _BLOCK.search(DOCS.read_text())
    assert found, "docs/postgres.md lost its worked example for a master tree"
    return found.group(1)


def test_the_worked_example_is_in_the_docs() -> None:
    script = worked_example()
    assert "readstream pg-build --source" in script
    assert "--readstream-impl=postgres" in script and "--readstream-pg-source=" in script and "-n 2" in script


@pytest.mark.postgres
def test_the_worked_example_runs_verbatim_on_a_master_tree(tmp_path: Path) -> None:
    tree = os.environ.get(ENV, "").strip()
    if not tree:
        pytest.skip(f"set {ENV} to a master (20devel) source tree to run docs/postgres.md's worked example")
    from pytest_readstream.postgres.builds.pgsource import source_version

    if source_version(Path(tree)) != "20devel":
        pytest.skip(f"{ENV}={tree} is not a master (20devel) tree")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "READSTREAM_IMPL"))}
    env["SRC"] = str(Path(tree).resolve())
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", worked_example()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=5400,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) >= 330, out[-2000:]
