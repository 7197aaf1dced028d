"""``readstream oracle``: the model's predictions beside what a real PostgreSQL 18 did.

For every scenario of :mod:`~pytest_readstream.postgres.fidelity.scenarios` the oracle

1. runs the scan through the model: ``reference_impl.scans.run_scan`` on a fresh ``Instance``
   with the scenario's settings and the relation built from its ``RelationSpec``, cold;
2. runs it on the server through :class:`~pytest_readstream.postgres.impl.implementation.PostgresImplementation`
   (the same spec built page for page, the same settings, cold, measured with per-backend
   ``pg_stat_io``);
3. compares reads, read bytes and reads per I/O context, the blocks left resident in shared
   buffers (every fork of the table and its indexes) and the answer fields the scenario names.

A scenario agrees when all of them are equal. When exact agreement is impossible the scenario
names a reason (:data:`~pytest_readstream.postgres.fidelity.scenarios.REASONS`) and the oracle runs that
reason's checks; the scenario is *explained* only if they hold. Nothing is compared loosely.

The JSON document (``--json PATH``) has the server's version and settings and, per scenario,
``{"name", "settings", "model": {...}, "server": {...}, "agree", "explained"}`` with ``reads``,
``read_bytes``, ``blocks`` (the target relation's resident main-fork blocks as ``[first, last]``
runs), ``io`` (per context), ``resident`` (per relation and fork) and ``answer``. Stored in
``fixtures/golden/oracle_pg18.json`` it is the golden data the project's tests check the model
against without a server: ``python -m pytest_readstream.postgres.fidelity.oracle --json PATH`` regenerates it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...protocol import ScanRequest
from ..impl.relbuild import server_names
from .facts import block_ranges
from .scenarios import REASONS, SCENARIOS, Scenario

__all__ = [
    "SCHEMA_VERSION",
    "compare",
    "describe_differences",
    "format_table",
    "markdown_table",
    "run_model",
    "run_oracle",
    "run_server",
    "reason_checks",
    "select",
    "side_from_record",
]

SCHEMA_VERSION = 1
_BLCKSZ = 8192


def select(only: Sequence[str] | None = None, *, fast: bool = False) -> list[Scenario]:
    """Scenarios whose name contains any of ``only`` (all when empty), optionally the fast ones."""
    chosen = [s for s in SCENARIOS if not only or any(o in s.name for o in only)]
    if fast:
        chosen = [s for s in chosen if s.fast]
    return chosen


def _request(scenario: Scenario, variant: str, version: str | None = None) -> ScanRequest:
    """The scan request of ``scenario``; ``version`` is the model version that judges the server
    (the server's own: ``model_version_for(server_version_num)``) unless the scenario names one."""
    from reference_impl import Settings

    settings = dict(scenario.settings)
    if version is not None:
        settings.setdefault("version", version)
    device = scenario.device_for(settings.get("version", version))
    return ScanRequest(
        scenario.scan,
        relation=scenario.relation,
        variant=variant,
        params=dict(scenario.params),
        settings=Settings(**settings),
        device=device if device is not None else "nvme",
        impose_device=device is not None,
    )


def _server_variant(scan: str, version: str | None = None) -> str:
    """The variant a stock server of ``version`` runs (the model's ``native_variant``: 19 streams
    ``pgstatindex``, ``pgstathashindex`` and ``pgstattuple_approx``, which 18 reads one block at a
    time); ``None`` is the ``Settings`` default version."""
    from reference_impl import Settings

    from ..impl.scanops import server_variant

    return server_variant(scan, Settings().version if version is None else version)


def _scenario_version(scenario: Scenario, version: str | None) -> str | None:
    """The model version that judges ``scenario``: its own setting, else ``version``."""
    return scenario.settings.get("version", version)


def _resident_ranges(resident: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[list[int]]]]:
    return {
        rel: {fork: block_ranges(blocks) for fork, blocks in sorted(forks.items()) if blocks}
        for rel, forks in sorted(resident.items())
    }


def _io(io: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {
        ctx: {"reads": int(v.get("reads", 0)), "read_bytes": int(v.get("read_bytes", 0))}
        for ctx, v in sorted(io.items())
        if v.get("reads", 0) or v.get("read_bytes", 0)
    }


def run_model(scenario: Scenario, version: str | None = None) -> dict[str, Any]:
    """The model's side of ``scenario`` (the model of ``version``, default the settings' own):
    figures, resident blocks per relation and fork, answer."""
    from reference_impl import ForkNumber
    from reference_impl import scans as model_scans

    from ..._reference_scans import INDEX_SCANS, prepare_instance

    request = _request(
        scenario, _server_variant(scenario.scan, _scenario_version(scenario, version)), version
    )
    inst, rel, _plan = prepare_instance(request)
    target = rel.heap
    kind = INDEX_SCANS.get(scenario.scan)
    if kind is not None:
        target = next(idx for ispec, idx in zip(rel.spec.indexes, rel.indexes.values()) if ispec.kind == kind)
    t0 = time.monotonic()
    backend = inst.backend()
    res = model_scans.run_scan(scenario.scan, backend, target, variant=request.variant, **request.params)
    seconds = time.monotonic() - t0
    resident: dict[str, dict[str, list[int]]] = {}
    for relation in (rel.heap, *rel.indexes.values()):
        forks: dict[str, list[int]] = {}
        for fork in ForkNumber:
            blocks = sorted(inst.pool.resident_blocks(relation, fork))
            if blocks:
                forks[fork.name.lower()] = blocks
        resident[relation.name] = forks
    return {
        "reads": res.read_count,
        "read_bytes": res.read_blocks * _BLCKSZ,
        "io": _io(res.io),
        "relation_reads": {
            relation.name: backend.stats.relation(relation.name).blks_read
            for relation in (rel.heap, *rel.indexes.values())
        },
        "resident": resident,
        "answer": dict(res.result),
        "visited": list(res.blocks or []),
        "error": res.error,
        "seconds": round(seconds, 3),
    }


def run_server(impl: Any, scenario: Scenario) -> dict[str, Any]:
    """The server's side of ``scenario``, measured through ``impl`` (a PostgresImplementation)."""
    version = getattr(impl, "model_version", None)
    request = _request(
        scenario, _server_variant(scenario.scan, _scenario_version(scenario, version)), version
    )
    t0 = time.monotonic()
    out = impl.run_scan(request)
    seconds = time.monotonic() - t0
    table, indexes = server_names(scenario.relation)
    model_name = {table: scenario.relation.name, **{v: k for k, v in indexes.items()}}
    return {
        "reads": out.reads,
        "read_bytes": out.read_bytes,
        "io": _io(out.extra.get("io", {})),
        "relation_reads": {
            model_name.get(name, name): int(v["blks_read"])
            for name, v in out.extra.get("relations", {}).items()
        },
        "resident": out.extra.get("resident", {}),
        "answer": dict(out.result),
        "visited": list(out.blocks or []),
        "error": out.error,
        "other_blocks_read": out.extra.get("other_blocks_read", 0),
        "settings": out.extra.get("settings", {}),
        "unapplied_params": out.extra.get("unapplied_params", {}),
        "wal_flushed": bool(out.extra.get("wal_flushed", False)),
        "seconds": round(seconds, 3),
    }


def _target_name(scenario: Scenario) -> str:
    return scenario.target or scenario.relation.name


def _main_blocks(side: dict[str, Any], relation: str) -> list[int]:
    return list(side.get("resident", {}).get(relation, {}).get("main", []))


def compare(scenario: Scenario, model: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """Which figures differ between the two sides (an empty ``differs`` list means agreement)."""
    differs: list[str] = []
    for key in ("reads", "read_bytes"):
        if model[key] != server[key]:
            differs.append(key)
    if model["io"] != server["io"]:
        differs.append("io")
    target = _target_name(scenario)
    blocks_equal = _main_blocks(model, target) == _main_blocks(server, target)
    if not blocks_equal:
        differs.append("blocks")
    if _norm_resident(model["resident"]) != _norm_resident(server["resident"]):
        differs.append("resident")
    for key in scenario.answer_keys:
        if model["answer"].get(key) != server["answer"].get(key):
            differs.append(f"answer.{key}")
    if (model.get("error") is None) != (server.get("error") is None):
        differs.append("error")
    if scenario.relation_reads and model.get("relation_reads") != server.get("relation_reads"):
        differs.append("relation_reads")
    # Blocks read that no relation of the scenario counts are catalog reads the warm-up missed.
    # Fewer (negative) happens when pinned blocks are never read: a ROLLBACK under sync drops
    # staged reads pg_statio already counted; such a scenario compares relation_reads instead.
    other = server.get("other_blocks_read", 0)
    if other > 0 or (other < 0 and not scenario.relation_reads):
        differs.append("other_blocks_read")
    return {"differs": differs, "blocks_equal": blocks_equal}


def _norm_resident(resident: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    return {
        r: {f: list(b) for f, b in forks.items() if b} for r, forks in resident.items() if any(forks.values())
    }


def _is_stride_order(visited: list[int], nblocks: int) -> bool:
    if len(visited) != len(set(visited)) or any(not 0 <= b < nblocks for b in visited):
        return False
    if len(visited) < 3:
        return True
    step = (visited[1] - visited[0]) % nblocks
    return all((visited[i + 1] - visited[i]) % nblocks == step for i in range(len(visited) - 1))


_CHECKS: dict[str, Callable[[Scenario, dict[str, Any], dict[str, Any]], bool]] = {
    "read_bytes_equal": lambda sc, m, s: m["read_bytes"] == s["read_bytes"],
    "contexts_equal": lambda sc, m, s: sorted(m["io"]) == sorted(s["io"]),
    "stride_order": lambda sc, m, s: (
        _is_stride_order(s["visited"], sc.relation.nblocks)
        and _is_stride_order(m["visited"], sc.relation.nblocks)
    ),
    "one_block_reads": lambda sc, m, s: (
        s["reads"] * _BLCKSZ == s["read_bytes"] and m["reads"] * _BLCKSZ == m["read_bytes"]
    ),
    "rows_equal": lambda sc, m, s: all(
        m["answer"].get(k) == s["answer"].get(k) for k in ("rows", "rows_per_command")
    ),
    "read_ahead_bounded": lambda sc, m, s: abs(m["read_bytes"] - s["read_bytes"]) < _BLCKSZ * _pin_limit(sc),
}


def _pin_limit(scenario: Scenario) -> int:
    """``GetPinLimit()`` of the scenario's settings: no stream pins more blocks ahead."""
    from reference_impl import Settings

    return Settings(**{k: v for k, v in scenario.settings.items() if k != "version"}).pin_limit


def reason_checks(
    scenario: Scenario, model: dict[str, Any], server: dict[str, Any], version: str | None = None
) -> dict[str, bool]:
    """The checks of the reason that applies to the scenario on ``version``, each True when it holds."""
    reason = scenario.reason_for(version)
    if reason is None:
        return {}
    return {name: bool(_CHECKS[name](scenario, model, server)) for name in REASONS[reason].checks}


#: Server runs of a timing-dependent scenario that disagreed with the model once.
_TIMING_REPEATS = 3
#: From this server_version_num on the read-ahead distance grows only after a real wait.
_WAIT_GROWS_DISTANCE = 190000


def _timing_dependent(impl: Any, scenario: Scenario) -> bool:
    """Whether the server's reads of ``scenario`` can depend on timing: PostgreSQL 19 or later
    (``read_stream.c`` grows the read-ahead only when the consumer waited) with asynchronous I/O."""
    server = getattr(impl, "server", None)
    version = getattr(server, "version_num", 0)
    return version >= _WAIT_GROWS_DISTANCE and scenario.settings.get("io_method", "worker") != "sync"


def _note_outcomes(
    record: dict[str, Any],
    scenario: Scenario,
    model: dict[str, Any],
    runs: list[dict[str, Any]],
    version: str | None = None,
) -> None:
    """Record the set of server outcomes of a repeated scenario; varying ones are timing-dependent.

    The scenario agrees only if every run agrees with the model; when the runs differ from each
    other it is marked ``timing_dependent`` with each outcome and whether it matched the model,
    never counted as agreeing because one run happened to."""
    seen: list[dict[str, Any]] = []
    for run in runs:
        key = (run["reads"], run["read_bytes"], json.dumps(run["io"], sort_keys=True))
        for o in seen:
            if o["key"] == key:
                o["count"] += 1
                break
        else:
            seen.append(
                {
                    "key": key,
                    "count": 1,
                    "reads": run["reads"],
                    "matches_model": not compare(scenario, model, run)["differs"],
                }
            )
    record["server_outcomes"] = [{k: v for k, v in o.items() if k != "key"} for o in seen]
    if len(seen) > 1:
        record["timing_dependent"] = True
        record["agree"] = False
    if record.get("explained") and not all(
        all(reason_checks(scenario, model, run, version).values()) for run in runs
    ):
        # Explained only if the reason's checks hold for every server run.
        del record["explained"]


def _record(
    scenario: Scenario, model: dict[str, Any], server: dict[str, Any], version: str | None = None
) -> dict[str, Any]:
    cmp = compare(scenario, model, server)
    agree = not cmp["differs"]
    target = _target_name(scenario)
    record: dict[str, Any] = {
        "name": scenario.name,
        "scan": scenario.scan,
        "variant": _server_variant(scenario.scan, _scenario_version(scenario, version)),
        "relation": _spec_dict(scenario.relation),
        "target": target,
        "settings": dict(scenario.settings),
        "params": dict(scenario.params),
        "answer_keys": list(scenario.answer_keys),
        "note": scenario.note,
    }
    for side_name, side in (("model", model), ("server", server)):
        record[side_name] = {
            "reads": side["reads"],
            "read_bytes": side["read_bytes"],
            "blocks": block_ranges(_main_blocks(side, target)),
            "io": side["io"],
            "resident": _resident_ranges(side["resident"]),
            "answer": {k: side["answer"].get(k) for k in scenario.answer_keys},
            "error": side.get("error"),
        }
        if scenario.relation_reads:
            record[side_name]["relation_reads"] = dict(side.get("relation_reads", {}))
    reason = scenario.reason_for(version)
    if reason is not None:
        # What the reason's checks look at, so the golden data can be re-checked without a server.
        record["server"]["visited"] = list(server.get("visited", []))
    record["server"]["other_blocks_read"] = server.get("other_blocks_read", 0)
    record["server"]["settings"] = dict(server.get("settings", {}))
    record["server"]["unapplied_params"] = server.get("unapplied_params", {})
    if server.get("wal_flushed"):
        # Which blocks a hint-setting ring scan keeps then depends on when WAL was flushed.
        record["server"]["wal_flushed"] = True
    record["agree"] = agree
    record["differs"] = cmp["differs"]
    record["blocks_equal"] = cmp["blocks_equal"]
    if not agree and reason is not None:
        checks = reason_checks(scenario, model, server, version)
        record["checks"] = checks
        if all(checks.values()):
            record["explained"] = {"reason": reason, "text": REASONS[reason].text}
    elif agree and reason is not None:
        record["note"] = (record["note"] + "; " if record["note"] else "") + (
            f"agreed although reason {reason!r} allowed a difference"
        )
    if not agree and not record.get("explained"):
        record["differences"] = describe_differences(record)
    record["seconds"] = {"model": model.get("seconds"), "server": server.get("seconds")}
    return record


def _expand(ranges: Sequence[Sequence[int]]) -> set[int]:
    return {b for first, last in ranges for b in range(first, last + 1)}


def _ranges_text(blocks: set[int], limit: int = 4) -> str:
    runs = block_ranges(sorted(blocks))
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit])
    more = f", ... ({len(runs) - limit} more runs)" if len(runs) > limit else ""
    return f"{len(blocks)} block(s): {shown}{more}"


def _block_sets(where: str, model: set[int], server: set[int]) -> list[str]:
    lines = []
    if model - server:
        lines.append(f"{where}: model only, absent on the server: {_ranges_text(model - server)}")
    if server - model:
        lines.append(f"{where}: server only, not in the model: {_ranges_text(server - model)}")
    return lines


def describe_differences(record: dict[str, Any]) -> list[str]:
    """What differs in a scenario's record, one line per difference, first values first.

    ``DIFFER: blocks,resident`` names fields; these lines say which blocks, which contexts,
    which values, so a report from a busy machine can be judged without rerunning it.
    """
    model, server = record["model"], record["server"]
    lines: list[str] = []
    if server.get("wal_flushed"):
        lines.append(
            "wal_flushed: WAL was flushed inside the measured scan in every attempt (another "
            "client or the WAL writer's timer), so its BULKREAD ring could reuse hinted buffers"
        )
    for key in record.get("differs", []):
        if key in ("reads", "read_bytes"):
            lines.append(f"{key}: model {model[key]}, server {server[key]}")
        elif key == "io":
            for ctx in sorted(set(model["io"]) | set(server["io"])):
                m, sv = model["io"].get(ctx), server["io"].get(ctx)
                if m != sv:
                    lines.append(f"io[{ctx}]: model {m}, server {sv}")
        elif key == "blocks":
            lines += _block_sets(
                f"{record.get('target', 'target')} main blocks",
                _expand(model["blocks"]),
                _expand(server["blocks"]),
            )
        elif key == "resident":
            rels = sorted(set(model["resident"]) | set(server["resident"]))
            for rel in rels:
                mf, sf = model["resident"].get(rel, {}), server["resident"].get(rel, {})
                for fork in sorted(set(mf) | set(sf)):
                    lines += _block_sets(
                        f"resident {rel}/{fork}", _expand(mf.get(fork, [])), _expand(sf.get(fork, []))
                    )
        elif key.startswith("answer."):
            name = key.split(".", 1)[1]
            lines.append(f"{key}: model {model['answer'].get(name)!r}, server {server['answer'].get(name)!r}")
        elif key == "error":
            lines.append(f"error: model {model.get('error')!r}, server {server.get('error')!r}")
        elif key == "other_blocks_read":
            lines.append(
                f"other_blocks_read: the server read {server.get('other_blocks_read')} block(s) of other relations"
            )
        else:
            lines.append(f"{key}: differs")
    return lines


def _spec_dict(spec: Any) -> dict[str, Any]:
    from dataclasses import fields

    out: dict[str, Any] = {}
    for f in fields(spec):
        if f.name.startswith("_"):
            continue
        v = getattr(spec, f.name)
        if f.name == "indexes":
            v = [
                {
                    "kind": i.kind,
                    "correlation": i.correlation,
                    **({"descending": True} if i.descending else {}),
                    **({"expression": list(i.expression)} if i.expression is not None else {}),
                    **({"deduplicate": False} if not i.deduplicate else {}),
                    **(
                        {
                            "key_hash": i.key_hash,
                            "overflow": list(i.overflow) if isinstance(i.overflow, tuple) else i.overflow,
                        }
                        if i.key_hash is not None
                        else {}
                    ),
                }
                for i in v
            ]
        elif isinstance(v, tuple):
            v = list(v)
        out[f.name] = v
    return out


def side_from_record(record: dict[str, Any], side: str = "server") -> dict[str, Any]:
    """A model/server side as :func:`compare` takes it, rebuilt from a stored record."""
    stored = record[side]
    resident = {
        rel: {
            fork: [b for first, last in runs for b in range(first, last + 1)] for fork, runs in forks.items()
        }
        for rel, forks in stored["resident"].items()
    }
    return {
        "reads": stored["reads"],
        "read_bytes": stored["read_bytes"],
        "io": stored["io"],
        "resident": resident,
        "answer": dict(stored["answer"]),
        "visited": list(stored.get("visited", [])),
        "error": stored.get("error"),
        "other_blocks_read": stored.get("other_blocks_read", 0),
        "relation_reads": dict(stored.get("relation_reads", {})),
    }


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """The printed table: scenario, reads and bytes of both sides, block sets, verdict."""
    head = ("scenario", "model reads", "server reads", "model bytes", "server bytes", "blocks", "result")
    rows = [head]
    for r in records:
        if "skipped" in r:
            rows.append((r["name"], "", "", "", "", "", f"skipped: {r['skipped']}"))
            continue
        verdict = (
            "agree"
            if r["agree"]
            else (
                f"explained ({r['explained']['reason']})"
                if r.get("explained")
                else "DIFFER: " + ",".join(r["differs"])
            )
        )
        rows.append(
            (
                r["name"],
                str(r["model"]["reads"]),
                str(r["server"]["reads"]),
                str(r["model"]["read_bytes"]),
                str(r["server"]["read_bytes"]),
                "equal" if r["blocks_equal"] else "differ",
                verdict,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:6], widths[1:6])] + [row[6]]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """The scenario table as Markdown (what ``docs/fidelity.md`` shows)."""
    lines = [
        "| scenario | scan | model reads | server reads | model bytes | server bytes | blocks | result |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in records:
        if "skipped" in r:
            lines.append(f"| {r['name']} | | | | | | | skipped: {r['skipped']} |")
            continue
        if r["agree"]:
            verdict = "agree"
        elif r.get("explained"):
            verdict = f"explained: `{r['explained']['reason']}`"
        else:
            verdict = "**differs**: " + ", ".join(r["differs"])
        lines.append(
            f"| {r['name']} | {r['scan']} | {r['model']['reads']} | {r['server']['reads']} | "
            f"{r['model']['read_bytes']} | {r['server']['read_bytes']} | "
            f"{'equal' if r['blocks_equal'] else 'differ'} | {verdict} |"
        )
    return "\n".join(lines)


def run_oracle(
    dsn: str | None = None,
    bindir: str | None = None,
    only: Sequence[str] | None = None,
    allow_nonempty: bool = False,
    *,
    fast: bool = False,
    impl: Any = None,
    echo: Callable[[str], None] | None = print,
) -> dict[str, Any]:
    """Run the scenarios on the model and on a server; print the table; return the JSON document.

    ``impl`` reuses a :class:`PostgresImplementation` (it is then not closed); otherwise one is
    made from ``dsn``/``bindir`` (default: the embedded server) and closed at the end.
    """
    from ..errors import PgSettingUnavailable
    from ..impl.implementation import PostgresImplementation
    from ..impl.relbuild import UnsupportedLayout

    chosen = select(only, fast=fast)
    if only and not chosen:
        from .scenarios import scenario_names

        raise ValueError(
            f"no scenario matches {list(only)}: allowed substrings of {', '.join(scenario_names())}"
        )
    own = impl is None
    if own:
        impl = PostgresImplementation(dsn=dsn, bindir=bindir, allow_nonempty=allow_nonempty)
    t0 = time.monotonic()
    records: list[dict[str, Any]] = []
    try:
        # Group by restart-level settings (stable within a group) to restart as rarely as possible.
        order = sorted(range(len(chosen)), key=lambda i: (chosen[i].server_key, i))
        by_name: dict[str, dict[str, Any]] = {}
        # The server is judged by the model of its own version (reference_impl.versions).
        version = impl.model_version
        for i in order:
            sc = chosen[i]
            model = run_model(sc, version)
            try:
                server = run_server(impl, sc)
                outcomes = [server]
                if _timing_dependent(impl, sc) and compare(sc, model, server)["differs"]:
                    # 19+ with asynchronous I/O: the read-ahead grows only after a real wait, so
                    # one disagreement may be timing. Measure again and report what was seen.
                    for _ in range(_TIMING_REPEATS - 1):
                        outcomes.append(run_server(impl, sc))
            except (PgSettingUnavailable, UnsupportedLayout) as err:
                by_name[sc.name] = {"name": sc.name, "skipped": str(err), "agree": False}
                continue
            by_name[sc.name] = _record(sc, model, server, version)
            if len(outcomes) > 1:
                _note_outcomes(by_name[sc.name], sc, model, outcomes, version)
            if echo is not None:
                r = by_name[sc.name]
                state = "agree" if r["agree"] else ("explained" if r.get("explained") else "DIFFER")
                if r.get("timing_dependent"):
                    seen = ", ".join(
                        f"{o['count']}x {o['reads']} reads{' (= model)' if o['matches_model'] else ''}"
                        for o in r["server_outcomes"]
                    )
                    state = f"timing-dependent, server outcomes: {seen}"
                echo(f"  {sc.name}: {state} ({r['seconds']['server']} s)")
                for line in r.get("differences", []):
                    echo(f"      {line}")
        records = [by_name[s.name] for s in chosen]
        server_facts = {
            "version": impl.server.version,
            "version_num": impl.server.version_num,
            "model_version": version,
            "kind": impl.server.kind,
            "block_size": impl.server.block_size,
        }
        builds = {"relations_built": impl.builds, "build_seconds": round(impl.build_seconds, 2)}
    finally:
        if own:
            impl.close()
    total = time.monotonic() - t0
    doc = {
        "schema": SCHEMA_VERSION,
        "description": (
            f"readstream oracle: the model of PostgreSQL {server_facts['model_version']}: its predictions "
            "beside measurements on a real server of that version (per-backend pg_stat_io diff, "
            "pg_buffercache), same relation layouts and settings"
        ),
        "server": server_facts,
        "runtime_seconds": round(total, 1),
        **builds,
        "summary": {
            "scenarios": len(records),
            "agree": sum(1 for r in records if r.get("agree")),
            "explained": sum(1 for r in records if r.get("explained")),
            "differ": sum(
                1
                for r in records
                if not r.get("agree")
                and not r.get("explained")
                and "skipped" not in r
                and not r.get("timing_dependent")
            ),
            "skipped": sum(1 for r in records if "skipped" in r),
            # Outcomes varied and no reason explains every one of them.
            "timing_dependent": sum(
                1 for r in records if r.get("timing_dependent") and not r.get("explained")
            ),
        },
        "reasons": {name: {"text": r.text, "checks": list(r.checks)} for name, r in REASONS.items()},
        "scenarios": records,
    }
    if echo is not None:
        echo(format_table(records))
        s = doc["summary"]
        echo(
            f"{s['scenarios']} scenarios: {s['agree']} agree, {s['explained']} explained, "
            f"{s['differ']} differ, {s['timing_dependent']} timing-dependent (server outcomes varied), "
            f"{s['skipped']} skipped ({doc['runtime_seconds']} s on PostgreSQL "
            f"{server_facts['version']}, judged by the model of version {server_facts['model_version']})"
        )
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pytest_readstream.postgres.fidelity.oracle``: the same as ``readstream oracle``."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_readstream.postgres.fidelity.oracle", description="Run the fidelity scenarios."
    )
    parser.add_argument("--pg-dsn")
    parser.add_argument("--pg-bindir")
    parser.add_argument(
        "--json", help="write the document here (fixtures/golden/oracle_pg18.json regenerates it)"
    )
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--fast", action="store_true", help="only the fast subset CI runs")
    args = parser.parse_args(argv)
    doc = run_oracle(dsn=args.pg_dsn, bindir=args.pg_bindir, only=args.only or None, fast=args.fast)
    if args.json:
        from pathlib import Path

        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if all(r.get("agree") or r.get("explained") for r in doc["scenarios"]) else 1


if __name__ == "__main__":
    sys.exit(main())
