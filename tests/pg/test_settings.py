"""Validation of harness settings (no server needed)."""

from __future__ import annotations

import pytest

from pytest_readstream.postgres import ServerSettings, SessionSettings
from pytest_readstream.postgres.servers.settings import SettingNotOnVersion


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


def test_io_workers_is_a_fixed_pool_on_every_version() -> None:
    s = ServerSettings(io_method="worker", io_workers=3)
    assert s.for_server(180006) == {"io_method": "worker", "io_workers": "3"}
    # 19 replaced io_workers by a pool between two bounds (method_worker.c): both at 3.
    assert s.for_server(190000) == {"io_method": "worker", "io_min_workers": "3", "io_max_workers": "3"}
    assert s.for_server(200000) == s.for_server(190000)
    assert "io_workers" in ServerSettings.server_names(180006)
    assert "io_workers" not in ServerSettings.server_names(190000)


def test_growing_pool_is_refused_on_18_in_one_line() -> None:
    s = ServerSettings(io_min_workers=1, io_max_workers=4)
    assert s.for_server(190000) == {"io_min_workers": "1", "io_max_workers": "4"}
    with pytest.raises(SettingNotOnVersion) as info:
        s.for_server(180006)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("io_min_workers = '1' is not a setting of PostgreSQL 18")


def test_io_workers_contradicting_pool_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="io_max_workers = 4 contradicts io_workers = 3"):
        ServerSettings(io_workers=3, io_max_workers=4)
    assert ServerSettings(io_workers=3, io_min_workers=3, io_max_workers=3).for_server(190000) == {
        "io_min_workers": "3",
        "io_max_workers": "3",
    }


def test_settings_read_back_per_version() -> None:
    values = {"io_method": "worker", "shared_buffers": "16384", "io_min_workers": "2", "io_max_workers": "8"}
    s = ServerSettings.from_server(values, 200000)
    assert (s.io_workers, s.io_min_workers, s.io_max_workers, s.shared_buffers) == (None, 2, 8, 16384)
    fixed = ServerSettings.from_server({**values, "io_min_workers": "5", "io_max_workers": "5"}, 190000)
    assert fixed.io_workers == 5
    old = ServerSettings.from_server({"io_workers": "3", "io_min_workers": "9"}, 180006)
    assert (old.io_workers, old.io_min_workers) == (3, None)
