"""Settings: GUC names, units, ranges, derived numbers, and one clear error line per bad value."""

from __future__ import annotations

import pytest

from reference_impl import SettingError, Settings


def test_defaults_and_derived_numbers_match_the_spec() -> None:
    s = Settings()
    assert s.max_backends == 136
    assert s.pin_limit == 94  # 16384 // (136 + 38)
    assert s.effective_io_combine_limit == 16
    assert not s.io_direct_data


def test_effective_io_combine_limit_is_capped_by_the_max() -> None:
    assert Settings(io_combine_limit=64, io_max_combine_limit=32).effective_io_combine_limit == 32


@pytest.mark.parametrize(
    "name, value, fragment",
    [
        ("io_combine_limit", 0, "io_combine_limit = 0 is out of range: allowed 1..128"),
        ("io_combine_limit", 129, "allowed 1..128"),
        ("io_max_combine_limit", -1, "io_max_combine_limit = -1"),
        ("effective_io_concurrency", 1001, "allowed 0..1000"),
        ("maintenance_io_concurrency", -5, "allowed 0..1000"),
        ("io_method", "aio", "io_method = 'aio' is invalid: allowed sync, worker, io_uring"),
        ("io_workers", 0, "allowed 1..32"),
        ("io_workers", 33, "allowed 1..32"),
        ("shared_buffers", 15, "shared_buffers = 15 is out of range: allowed 16.."),
        ("max_connections", 0, "max_connections = 0"),
        ("vacuum_buffer_usage_limit", 64, "allowed 0 (no ring) or 128 kB"),
        ("vacuum_buffer_usage_limit", 16777217, "vacuum_buffer_usage_limit"),
        ("debug_io_direct", "data,bogus", "debug_io_direct = 'data,bogus' is invalid"),
        ("version", "17", "version = '17' has no model: allowed 18, 19, 20devel (or master = 20devel)"),
        ("synchronize_seqscans", "maybe", "synchronize_seqscans = 'maybe' is invalid: allowed on/off"),
        ("io_combine_limit", 1.5, "io_combine_limit = 1.5"),
    ],
)
def test_bad_values_raise_one_clear_error(name: str, value: object, fragment: str) -> None:
    with pytest.raises(SettingError) as info:
        Settings.from_mapping({name: value})
    msg = str(info.value)
    assert fragment in msg
    assert "\n" not in msg


def test_units_are_parsed_like_postgresql() -> None:
    s = Settings.parse_assignments(
        ["io_combine_limit=128kB", "shared_buffers=1GB", "vacuum_buffer_usage_limit=256kB"]
    )
    assert s.io_combine_limit == 16 and s.shared_buffers == 131072 and s.vacuum_buffer_usage_limit == 256
    assert Settings.parse_assignments(["io_max_combine_limit=1MB"]).io_max_combine_limit == 128
    with pytest.raises(SettingError, match="invalid unit 'XB'"):
        Settings.parse_assignments(["shared_buffers=1XB"])
    with pytest.raises(SettingError, match="not of the form NAME=VALUE"):
        Settings.parse_assignments(["shared_buffers"])
    with pytest.raises(SettingError, match="unknown setting 'shared_bufers'"):
        Settings.parse_assignments(["shared_bufers=1"])


def test_tiny_pool_gives_a_zero_pin_limit() -> None:
    assert Settings(shared_buffers=16, max_connections=1).pin_limit == 0


def test_master_names_the_newest_version() -> None:
    from reference_impl.versions import MASTER, model_version_for

    assert Settings(version="master").version == MASTER == "20devel"
    assert Settings(version="master") == Settings(version="20devel")
    assert [model_version_for(n) for n in (180006, 190000, 190003, 200000)] == ["18", "19", "19", "20devel"]
    for bad in (170010, 210000, "180006", None):
        with pytest.raises(SettingError, match=r"without a model: allowed 18\.x, 19\.x and 20devel"):
            model_version_for(bad)  # type: ignore[arg-type]
