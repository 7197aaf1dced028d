"""Validation of harness settings (no server needed)."""

from __future__ import annotations

import pytest

from pytest_readstream.postgres import ServerSettings, SessionSettings


def test_server_settings_to_gucs_skips_none() -> None:
    s = ServerSettings(io_method="sync", shared_buffers=2048, debug_io_direct=" data , wal ")
    assert s.to_gucs() == {
        "io_method": "sync",
        "shared_buffers": "2048",
        "debug_io_direct": "data,wal",
    }
    assert ServerSettings().to_gucs() == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"io_method": "posix_aio"}, "io_method = 'posix_aio' is not valid; allowed: sync"),
        ({"shared_buffers": 15}, "shared_buffers = 15 is out of range; allowed: 16.."),
        ({"io_max_combine_limit": 129}, "io_max_combine_limit = 129 is out of range"),
        ({"io_workers": 0}, "io_workers = 0 is out of range; allowed: 1..32"),
        ({"debug_io_direct": "data,index"}, "unknown flag(s) ['index']"),
    ],
)
def test_server_settings_reject_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=r".*") as info:
        ServerSettings(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_session_settings_defaults_and_gucs() -> None:
    s = SessionSettings(
        io_combine_limit=1,
        synchronize_seqscans=False,
        vacuum_buffer_usage_limit=0,
        planner={"enable_seqscan": False, "enable_bitmapscan": True},
    )
    assert s.to_gucs() == {
        "io_combine_limit": "1",
        "synchronize_seqscans": "off",
        "max_parallel_workers_per_gather": "0",
        "vacuum_buffer_usage_limit": "0",
        "enable_bitmapscan": "on",
        "enable_seqscan": "off",
    }
    assert hash(s) == hash(SessionSettings(**{**s.__dict__}))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"io_combine_limit": 0}, ValueError, "io_combine_limit = 0 is out of range"),
        ({"effective_io_concurrency": 1001}, ValueError, "allowed: 0..1000"),
        ({"vacuum_buffer_usage_limit": 64}, ValueError, "allowed: 128..16777216 or 0"),
        ({"synchronize_seqscans": 1}, TypeError, "synchronize_seqscans must be True"),
        ({"io_combine_limit": True}, TypeError, "io_combine_limit must be an int"),
        ({"planner": {"seqscan": False}}, ValueError, "planner switch 'seqscan'"),
    ],
)
def test_session_settings_reject_bad_values(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        SessionSettings(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
