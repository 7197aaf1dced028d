"""Replay PostgreSQL 18.6 sampling measurements against the model, without a server.

The data come from ``fixtures/scripts/measure_sampling.py`` (see its docstring);
every recorded case must be reproduced exactly: hash values, PRNG output, the
TIDs SYSTEM and BERNOULLI returned, and the stride structure of SYSTEM_ROWS and
SYSTEM_TIME, whose seeds the server does not reveal.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reference_impl.sampling import (
    INVALID_BLOCK_NUMBER,
    PgPrng,
    SamplingError,
    StrideSampler,
    SystemRowsSampler,
    bernoulli_sample_tids,
    hash_bytes_uint32,
    hashfloat8,
    percent_as_float4,
    system_rows_ntuples,
    system_sample_blocks,
    system_time_millis,
)

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "sampling_pg18.json"


@cache
def golden() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GOLDEN.read_text())
    return data


def _cases(section: str) -> list[dict[str, Any]]:
    return list(golden()[section])


def _sql_float(text: str) -> float:
    """Value of the few SQL expressions the measurement script uses as arguments."""
    text = text.strip()
    text = text.removesuffix("::float8")
    text = text.strip("'")
    if "+" in text[1:]:
        left, right = text.split("+", 1)
        return float(left) + float(right)
    if "/" in text:
        left, right = text.split("/", 1)
        return float(left) / float(right)
    return float(text)


def _table(name: str) -> dict[str, Any]:
    table: dict[str, Any] = golden()["tables"][name]
    return table


def _live(name: str) -> set[tuple[int, int]]:
    return {(b, o) for b, o in _table(name)["live_tids"]}


def _live_by_block(name: str) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for b, o in sorted(_live(name)):
        out[b].append(o)
    return out


def test_server_identity() -> None:
    server = golden()["server"]
    assert server["settings"]["server_version"].startswith("18.")
    assert server["settings"]["block_size"] == "8192"
    assert golden()["schema"] == 1


def test_table_layouts_are_as_built() -> None:
    onerow = _table("onerow")
    assert onerow["nblocks"] == 3000 and onerow["max_offsets"] == [1] * 3000
    assert len(onerow["live_tids"]) == 3000
    assert _table("test_tablesample")["max_offsets"] == [3, 3, 3, 1]
    multi = _table("multi")
    assert len(multi["max_offsets"]) == multi["nblocks"]
    # Line pointers outnumber live tuples: deleted rows still occupy offsets.
    assert sum(multi["max_offsets"]) > len(multi["live_tids"])
    assert golden()["max_offsets_after"] == {t: v["max_offsets"] for t, v in golden()["tables"].items()}


@pytest.mark.parametrize("case", _cases("hashfloat8"), ids=lambda c: c["x"])
def test_hashfloat8(case: dict[str, Any]) -> None:
    assert hashfloat8(float(case["x"])) == case["hash_signed"] & 0xFFFFFFFF


@pytest.mark.parametrize("case", _cases("hash_bytes"), ids=lambda c: f"{c['function']}-{len(c['words'])}w")
def test_hash_bytes(case: dict[str, Any]) -> None:
    assert hash_bytes_uint32(case["words"]) == case["hash_signed"] & 0xFFFFFFFF


@pytest.mark.parametrize("case", _cases("setseed_random"), ids=lambda c: c["setseed_sql"])
def test_setseed_random(case: dict[str, Any]) -> None:
    prng = PgPrng()
    prng.fseed(_sql_float(case["setseed_sql"]))
    assert [prng.double() for _ in case["random"]] == case["random"]


def _check_seed_and_percent(case: dict[str, Any]) -> tuple[float, int]:
    percent = case["percent_real"]
    assert percent_as_float4(_sql_float(case["percent_sql"])) == percent
    seed = hashfloat8(_sql_float(case["repeatable_sql"]))
    assert seed == case["seed_signed"] & 0xFFFFFFFF
    return percent, seed


@pytest.mark.parametrize(
    "case",
    _cases("system") + [c for c in _cases("regression") if c["method"] == "SYSTEM"],
    ids=lambda c: f"{c['table']}-{c['percent_sql']}-{c['repeatable_sql']}",
)
def test_system(case: dict[str, Any]) -> None:
    percent, seed = _check_seed_and_percent(case)
    table = _table(case["table"])
    blocks = system_sample_blocks(table["nblocks"], percent, seed)
    live = _live_by_block(case["table"])
    expected = [[b, o] for b in blocks.tolist() for o in live.get(b, [])]
    assert case["tids"] == expected


@pytest.mark.parametrize(
    "case",
    _cases("bernoulli") + [c for c in _cases("regression") if c["method"] == "BERNOULLI"],
    ids=lambda c: f"{c['table']}-{c['percent_sql']}-{c['repeatable_sql']}",
)
def test_bernoulli(case: dict[str, Any]) -> None:
    percent, seed = _check_seed_and_percent(case)
    table = _table(case["table"])
    live = _live(case["table"])
    candidates = bernoulli_sample_tids(np.array(table["max_offsets"]), percent, seed)
    expected = [[b, o] for b, o in candidates.tolist() if (b, o) in live]
    assert case["tids"] == expected


def test_regression_ids_match_postgres_expected_output() -> None:
    # PostgreSQL's src/test/regress/expected/tablesample.out for these queries.
    ids = {(c["method"], c["percent_sql"]): c["ids"] for c in _cases("regression")}
    assert ids[("SYSTEM", "50")] == [3, 4, 5, 6, 7, 8]
    assert ids[("SYSTEM", "100.0/11")] == []
    assert ids[("BERNOULLI", "50")] == [4, 5, 6, 7, 8]
    assert ids[("BERNOULLI", "5.5")] == [7]


def _infer_plan(blocks: list[int], nblocks: int) -> StrideSampler:
    step = (blocks[1] - blocks[0]) % nblocks
    return StrideSampler.from_plan(nblocks, (blocks[0] - step) % nblocks, step)


def _replay(plan: StrideSampler, nblocks: int, limit: int) -> list[int]:
    rows = SystemRowsSampler(plan)
    rows.begin_scan(limit)
    out = []
    while (blk := rows.next_block(nblocks, donetuples=len(out))) != INVALID_BLOCK_NUMBER:
        out.append(blk)  # one tuple per page on this table
    return out


@pytest.mark.parametrize("case", _cases("system_rows"), ids=lambda c: str(c["ntuples"]))
def test_system_rows_stride_on_one_row_pages(case: dict[str, Any]) -> None:
    nblocks = _table("onerow")["nblocks"]
    blocks = case["tids_blocks"]
    assert len(blocks) == min(case["ntuples"], nblocks)
    assert len(set(blocks)) == len(blocks)
    if len(blocks) >= 2:
        plan = _infer_plan(blocks, nblocks)
        assert math.gcd(plan.step, nblocks) == 1
        assert _replay(plan, nblocks, case["ntuples"]) == blocks


@pytest.mark.parametrize("case", _cases("system_time"), ids=lambda c: c["millis_sql"])
def test_system_time_stride(case: dict[str, Any]) -> None:
    nblocks = _table("onerow")["nblocks"]
    blocks = case["tids_blocks"]
    if system_time_millis(_sql_float(case["millis_sql"])) == 0:
        assert blocks == []
        return
    assert sorted(blocks) == list(range(nblocks))
    assert _replay(_infer_plan(blocks, nblocks), nblocks, 10**9) == blocks


def _system_rows_tids(
    plan: StrideSampler, live: dict[int, list[int]], nblocks: int, limit: int
) -> list[list[int]]:
    """SYSTEM_ROWS on a table with several tuples per page: NextSampleTuple stops
    in the middle of a page once the scan node has returned ``limit`` tuples.
    """
    rows = SystemRowsSampler(plan)
    rows.begin_scan(limit)
    out: list[list[int]] = []
    while (blk := rows.next_block(nblocks, donetuples=len(out))) != INVALID_BLOCK_NUMBER:
        for off in live.get(blk, []):
            if rows.tuples_exhausted(len(out)):
                break
            out.append([blk, off])
    return out


@pytest.mark.parametrize("case", _cases("system_rows_multi"), ids=lambda c: str(c["ntuples"]))
def test_system_rows_on_varied_pages(case: dict[str, Any]) -> None:
    nblocks = _table("multi")["nblocks"]
    live = _live_by_block("multi")
    assert len(case["tids"]) == min(case["ntuples"], sum(map(len, live.values())))
    # Pages without live tuples are visited but leave no trace, so search every
    # plan: cheaply on the order of non-empty pages, then replay the survivors.
    seen = list(dict.fromkeys(b for b, _ in case["tids"]))
    nonempty = np.array([b in live for b in range(nblocks)])
    ks = np.arange(1, nblocks + 1)
    matches = []
    for step in range(1, max(2, nblocks)):
        if math.gcd(step, nblocks) != 1:
            continue
        for first in range(nblocks):
            order = (first + ks * step) % nblocks
            if order[nonempty[order]][: len(seen)].tolist() != seen:
                continue
            plan = StrideSampler.from_plan(nblocks, first, step)
            if _system_rows_tids(plan, live, nblocks, case["ntuples"]) == case["tids"]:
                matches.append((first, step))
    assert matches, "no (firstblock, step) plan reproduces the server's SYSTEM_ROWS output"


@pytest.mark.parametrize("case", _cases("rescans"), ids=lambda c: f"{c['method']}({c['argument_sql']})")
def test_rescans_reuse_the_plan(case: dict[str, Any]) -> None:
    assert "error" not in case and case["sample_scan_loops"] == 3
    nblocks = _table("onerow")["nblocks"]
    scans = case["scans"]
    plan = _infer_plan(scans[-1], nblocks)
    for g, scan in enumerate(scans, start=1):
        if case["argument_sql"] == "v.g * 3":
            limit = 3 * g
        elif case["method"] == "SYSTEM_ROWS":
            limit = int(case["argument_sql"])
        else:
            limit = 10**9
        plan.begin_scan()
        assert _replay(plan, nblocks, limit) == scan


_VALIDATORS = {
    "SYSTEM": percent_as_float4,
    "BERNOULLI": percent_as_float4,
    "SYSTEM_ROWS": lambda text: system_rows_ntuples(int(text)),
    "SYSTEM_TIME": system_time_millis,
}


@pytest.mark.parametrize("case", _cases("errors"), ids=lambda c: f"{c['method']}({c['argument_sql']})")
def test_server_errors_are_model_errors(case: dict[str, Any]) -> None:
    assert case["sqlstate"] is not None, "the server accepted this argument"
    text = case["argument_sql"]
    value: Any = text if case["method"] == "SYSTEM_ROWS" else _sql_float(text)
    with pytest.raises(SamplingError):
        _VALIDATORS[case["method"]](value)
