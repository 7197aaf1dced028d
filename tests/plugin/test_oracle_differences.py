"""Issue 15 item 6: a DIFFER from ``readstream oracle`` says what differs, not only which field.

Built from the stored golden record of ``pgstattuple_approx-unhinted`` with the server side
changed the way the busy-machine report described it (model-resident blocks 135-167 absent on
the server), so no server is needed.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pytest_readstream.postgres.fidelity.oracle import describe_differences, format_table

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "oracle_pg18.json"


def _record(name: str) -> dict[str, Any]:
    doc = json.loads(GOLDEN.read_text())
    return copy.deepcopy(next(r for r in doc["scenarios"] if r["name"] == name))


def _without(ranges: list[list[int]], first: int, last: int) -> list[list[int]]:
    blocks = {b for a, z in ranges for b in range(a, z + 1)} - set(range(first, last + 1))
    out: list[list[int]] = []
    for b in sorted(blocks):
        if out and out[-1][1] == b - 1:
            out[-1][1] = b
        else:
            out.append([b, b])
    return out


def test_differ_lines_name_the_blocks_contexts_and_values() -> None:
    record = _record("pgstattuple_approx-unhinted")
    assert record["agree"]
    target = record["target"]
    server = record["server"]
    server["resident"][target]["main"] = _without(server["resident"][target]["main"], 135, 167)
    server["reads"] += 2
    server["io"] = {ctx: dict(v) for ctx, v in server["io"].items()}
    ctx = sorted(server["io"])[0]
    server["io"][ctx]["reads"] = server["io"][ctx].get("reads", 0) + 2
    record.update(agree=False, differs=["reads", "io", "resident"])
    lines = describe_differences(record)
    assert lines[0] == f"reads: model {record['model']['reads']}, server {server['reads']}"
    assert lines[1].startswith(f"io[{ctx}]: model {record['model']['io'][ctx]}, server ")
    missing = [line for line in lines if line.startswith(f"resident {target}/main: model only")]
    assert missing == [
        f"resident {target}/main: model only, absent on the server: 25 block(s): 135-137, 139-141, 143-145, 147-158, ... (2 more runs)"
    ]
    assert "DIFFER: reads,io,resident" in format_table([record])


def test_agreeing_scenarios_have_nothing_to_say() -> None:
    record = _record("pgstattuple_approx-unhinted")
    assert describe_differences(record) == []
