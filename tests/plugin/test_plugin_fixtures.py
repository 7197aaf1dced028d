"""The fixtures and markers, as a user's test suite sees them."""

from __future__ import annotations

import re

import pytest


def test_settings_default_marker_and_indirect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import Settings

        def test_default(readstream_settings):
            assert readstream_settings == Settings()

        @pytest.mark.readstream_settings(io_method="sync", io_combine_limit="64kB")
        def test_marker(readstream_settings):
            assert readstream_settings.io_method == "sync"
            assert readstream_settings.io_combine_limit == 8

        @pytest.mark.readstream_settings(io_method="sync", effective_io_concurrency=4)
        class TestLayers:
            @pytest.mark.readstream_settings(effective_io_concurrency=1)
            def test_closest_wins_per_key(self, readstream_settings):
                assert (readstream_settings.io_method, readstream_settings.effective_io_concurrency) == ("sync", 1)

        @pytest.mark.readstream_settings(io_method="sync")
        @pytest.mark.parametrize(
            "readstream_settings",
            [{"io_combine_limit": 4}, Settings(version="master")],
            indirect=True,
            ids=["dict", "object"],
        )
        def test_indirect(readstream_settings):
            assert readstream_settings.io_combine_limit == 4 or readstream_settings.version == "20devel"
            if readstream_settings.version == "18":
                assert readstream_settings.io_method == "sync"  # a dict updates the marker's settings

        @pytest.mark.readstream_settings(io_combine_limit=1000)
        def test_bad_value(readstream_settings):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*SettingError: io_combine_limit = 1000 is out of range: allowed 1..128*"])


@pytest.mark.parametrize(
    ("version", "pool"),
    [("18", {"io_workers": 32}), ("19", {"io_min_workers": 32, "io_max_workers": 32}), ("master", None)],
)
def test_settings_stated_in_the_terms_of_the_run_version(
    pytester: pytest.Pytester, version: str, pool: dict[str, int] | None
) -> None:
    """A function of the settings so far states a setting each version names its own way (the
    I/O worker pool); as a plain dict, 18's io_workers is refused on 19 and later."""
    pytester.makepyfile(
        f"""
        import pytest
        from reference_impl.settings import io_worker_pool

        def pool32(base):
            return {{"io_method": "worker", **io_worker_pool(base.version, 32)}}

        @pytest.mark.parametrize("readstream_settings", [pool32], indirect=True, ids=["pool"])
        def test_pool(readstream_settings):
            s = readstream_settings
            assert s.io_method == "worker"
            if s.version == "18":
                assert s.io_workers == 32
            else:
                assert (s.io_min_workers, s.io_max_workers) == (32, 32)
            expected = {pool!r}
            if expected is not None:
                assert {{k: getattr(s, k) for k in expected}} == expected

        @pytest.mark.parametrize("readstream_settings", [{{"io_workers": 32}}], indirect=True)
        def test_plain(readstream_settings):
            assert readstream_settings.version == "18"
        """
    )
    result = pytester.runpytest(f"--readstream-model-version={version}")
    if version == "18":
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*io_workers is not a setting of PostgreSQL *: it has io_min_workers*"])


def test_storage_default_marker_and_indirect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import DEVICE_PROFILES, DeviceProfile

        def test_default(readstream_storage, readstream_instance):
            assert readstream_storage is DEVICE_PROFILES["nvme"]
            assert readstream_instance.device.profile is readstream_storage

        @pytest.mark.readstream_storage("cloud-1ms")
        def test_named(readstream_storage):
            assert readstream_storage.read_latency_us == 1000

        @pytest.mark.readstream_storage("hdd", jitter=0.1)
        def test_named_with_changes(readstream_storage):
            assert readstream_storage.name == "hdd(jitter=0.1)"
            assert (readstream_storage.read_latency_us, readstream_storage.jitter) == (8000, 0.1)

        @pytest.mark.parametrize(
            "readstream_storage",
            ["sata-ssd", {"profile": "ram", "channels": 2},
             DeviceProfile("mine", read_latency_us=5, write_latency_us=5, bandwidth_mb_s=10.0, channels=1)],
            indirect=True,
        )
        def test_indirect(readstream_storage):
            assert readstream_storage.name in ("sata-ssd", "ram(channels=2)", "mine")

        @pytest.mark.readstream_storage("floppy")
        def test_unknown(readstream_storage):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(
        ["*unknown device profile 'floppy': allowed nvme, sata-ssd, cloud-1ms, hdd, ram*"]
    )


def test_faults_marker_indirect_and_appended(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import CancelAt, Fault, FaultPlan, ForeignIO, ReadIOError

        def read_all(instance, backend, blocks):
            if "t" not in [r.name for r in instance.storage.relations()]:
                instance.create_relation("t", 8)
            for b in blocks:
                backend.release_buffer(backend.read_buffer(instance.relation("t"), b))

        def test_default_is_empty(readstream_faults, readstream_instance, readstream_test_seed):
            assert readstream_faults.faults == [] and readstream_faults.seed == readstream_test_seed
            assert readstream_instance.storage.faults is readstream_faults

        @pytest.mark.readstream_faults(Fault("eio", relation="t", block=3), cancel=CancelAt(5))
        def test_marker(readstream_faults, readstream_instance, readstream_backend):
            assert readstream_faults.cancel == CancelAt(5)
            with pytest.raises(ReadIOError):
                read_all(readstream_instance, readstream_backend, range(8))
            readstream_backend.abort()
            assert [e["fault"] for e in readstream_faults.ledger] == ["eio"]

        @pytest.mark.readstream_faults(random={"relation": "t", "nblocks": 100, "count": 4, "kinds": ("latency",)})
        def test_random_is_seeded_by_the_test(readstream_faults, readstream_test_seed):
            again = FaultPlan.random(readstream_test_seed, relation="t", nblocks=100, count=4, kinds=("latency",))
            assert readstream_faults.faults == again.faults

        @pytest.mark.parametrize(
            "readstream_faults",
            [[Fault("latency", nth_read=1, extra_us=500)],
             {"faults": [{"kind": "eio", "relation": "t", "block": 1}], "foreign_ios": [], "cancel": None}],
            indirect=True,
        )
        def test_indirect(readstream_faults):
            assert len(readstream_faults.faults) == 1

        def test_appended_fault_applies(readstream_faults, readstream_instance, readstream_backend):
            read_all(readstream_instance, readstream_backend, range(5))
            readstream_faults.faults.append(Fault("eio", relation="t", block=5))
            with pytest.raises(ReadIOError):
                read_all(readstream_instance, readstream_backend, range(5, 8))
            readstream_backend.abort()

        @pytest.mark.readstream_faults(unknown=1)
        def test_bad_keyword(readstream_faults):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(["*unknown keyword 'unknown': allowed faults, foreign_ios, cancel, random*"])


def test_instance_and_its_parts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import Backend, Instance

        @pytest.mark.readstream_settings(io_method="sync")
        @pytest.mark.readstream_storage("hdd")
        def test_wiring(readstream_instance, readstream_settings, readstream_storage, readstream_faults,
                        readstream_test_seed, readstream_clock, readstream_pool, readstream_backend):
            assert isinstance(readstream_instance, Instance)
            assert readstream_instance.settings is readstream_settings
            assert readstream_instance.device.profile is readstream_storage
            assert readstream_instance.storage.faults is readstream_faults
            assert readstream_instance.seed == readstream_test_seed
            assert readstream_instance.debug is True
            assert readstream_clock is readstream_instance.clock
            assert readstream_pool is readstream_instance.pool
            assert isinstance(readstream_backend, Backend) and readstream_backend.instance is readstream_instance
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_relation_shapes_fields_and_indirect(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl.relations import SHAPES, RelationSpec

        def test_default(readstream_relation, readstream_instance):
            assert readstream_relation.spec == SHAPES["small"]
            assert readstream_instance.relation("small") is readstream_relation.heap
            assert readstream_relation.heap.nblocks() == 1000 and readstream_relation.indexes

        @pytest.mark.readstream_relation("segment-crossing")
        def test_shape(readstream_relation):
            assert readstream_relation.heap.nblocks() == 131080

        @pytest.mark.readstream_relation("bulk", nblocks=12)
        def test_shape_with_fields(readstream_relation):
            assert readstream_relation.spec == SHAPES["bulk"].replace(nblocks=12)

        @pytest.mark.readstream_relation(nblocks=40, dead_fraction=0.5)
        def test_fields_take_the_test_seed(readstream_relation, readstream_test_seed):
            assert readstream_relation.spec == RelationSpec(nblocks=40, dead_fraction=0.5, seed=readstream_test_seed)

        @pytest.mark.parametrize(
            "readstream_relation",
            ["tiny", RelationSpec(name="r", nblocks=3), {"shape": "tiny", "nblocks": 2}],
            indirect=True,
        )
        def test_indirect(readstream_relation):
            assert readstream_relation.heap.nblocks() in (8, 3, 2)

        @pytest.mark.readstream_relation(shape="bulk", nblocks=12)
        def test_shape_as_keyword(readstream_relation):
            assert readstream_relation.spec == SHAPES["bulk"].replace(nblocks=12)

        @pytest.mark.readstream_relation("huge")
        def test_unknown(readstream_relation):
            pass

        @pytest.mark.readstream_relation("tiny", nblockz=7)
        def test_unknown_field(readstream_relation):
            pass

        @pytest.mark.readstream_relation("tiny", shape="bulk")
        def test_shape_twice(readstream_relation):
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=8, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*unknown relation shape 'huge': allowed tiny, small, bulk*",
            "*readstream_relation: unknown RelationSpec field(s) nblockz: allowed shape, all_frozen_fraction,*",
            "*readstream_relation: the shape is given twice ('tiny' and shape='bulk')*",
        ],
        consecutive=False,
    )


def test_seeds_are_per_test_and_reproducible(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_a(readstream_seed, readstream_test_seed, readstream_rng, readstream_faker):
            print("SEEDS", "a", readstream_seed, readstream_test_seed, int(readstream_rng.integers(10**9)),
                  readstream_faker.name().replace(" ", "_"))

        def test_b(readstream_seed, readstream_test_seed):
            print("SEEDS", "b", readstream_seed, readstream_test_seed)
        """
    )

    def seeds(*args: str) -> dict[str, list[str]]:
        result = pytester.runpytest("-s", *args)
        out = {}
        for line in result.outlines:
            if "SEEDS " in line:
                fields = line.split("SEEDS ", 1)[1].split()
                out[fields[0]] = fields[1:]
        return out

    first, second = seeds("--readstream-seed=5"), seeds("--readstream-seed=5")
    assert first == second
    assert first["a"][0] == first["b"][0] == "5"
    assert first["a"][1] != first["b"][1]  # each test its own seed
    alone = seeds("--readstream-seed=5", "-k", "test_a")
    assert alone["a"] == first["a"]  # independent of which other tests run
    assert seeds("--readstream-seed=6")["a"] != first["a"]


def test_stream_factory_runs_the_implementation_and_reports_leaked_pins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import BlockRangeReadStreamPrivate, block_range_read_stream_cb

        def test_clean(readstream_relation, readstream_backend, readstream_stream_factory, readstream_stats):
            rel = readstream_relation.heap
            stream = readstream_stream_factory(rel, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 100))
            got = []
            for buf in stream:
                got.append(readstream_backend.buffer_block(buf))
                readstream_backend.release_buffer(buf)
            stream.end()
            readstream_stats.record_backend(readstream_backend)
            assert got == list(range(100))

        def test_leak(readstream_relation, readstream_backend, readstream_stream_factory):
            stream = readstream_stream_factory(
                readstream_relation.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 50)
            )
            stream.next_buffer()

        def test_failing_test_gets_no_second_error(readstream_relation, readstream_stream_factory):
            stream = readstream_stream_factory(
                readstream_relation.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 50)
            )
            stream.next_buffer()
            assert False, "the test's own failure"
        """
    )
    result = pytester.runpytest("-rfE")
    result.assert_outcomes(passed=2, failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leak*",
            "readstream_stream_factory: the backend still holds * pin(s) on * buffer(s) at the end of the test:"
            "*streams never ended: #1 ReadStream(small*",
        ]
    )
    result.stdout.no_fnmatch_line("*ERROR at teardown of test_failing_test_gets_no_second_error*")


def test_capability_skips(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        scansonly="""
        from pytest_readstream.protocol import ScanOutcome

        class ScansOnly:
            name = "scans-only"
            capabilities = frozenset({"scans"})
            def scan_variants(self, scan):
                return ("streamed",)
            def run_scan(self, request):
                return ScanOutcome(result={}, reads=0, read_bytes=0)
        """,
        test_caps="""
        import pytest
        from reference_impl import Settings

        @pytest.mark.readstream_invariant("pause", "MAY")
        @pytest.mark.readstream_requires("pause-resume")
        def test_pause_v18(readstream_impl):
            pass

        @pytest.mark.readstream_settings(version="master")
        @pytest.mark.readstream_requires("pause-resume", "set-strategy")
        def test_pause_master(readstream_impl):
            pass

        @pytest.mark.readstream_requires("pause-resume")
        @pytest.mark.parametrize("readstream_settings", [{"version": "master"}], indirect=True)
        def test_pause_master_indirect(readstream_settings):
            pass

        @pytest.mark.readstream_requires("scans")
        def test_scans(readstream_impl):
            pass

        def test_factory(readstream_stream_factory):
            pass
        """,
    )
    pytester.syspathinsert()
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "skipped for missing capabilities: pause-resume (1)",
            "SKIPPED [[]1[]] test_caps.py:4: implementation 'reference' lacks capability 'pause-resume' "
            "(stream.pause() / stream.resume())",
        ],
        consecutive=False,
    )
    result = pytester.runpytest("-rs", "--readstream-impl=scansonly:ScansOnly")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(
        [
            "skipped for missing capabilities: pause-resume (3), set-strategy (1), stream-api (1)",
            "*implementation 'scans-only' lacks capability 'stream-api' (begin_stream() over the harness's buffer manager)",
        ],
        consecutive=False,
    )


def test_reproduction_section_is_copy_pasteable(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import Fault

        @pytest.mark.readstream_settings(io_method="sync", io_combine_limit=4)
        @pytest.mark.readstream_storage("hdd")
        @pytest.mark.readstream_faults(Fault("latency", relation="tiny", block=2, extra_us=900))
        @pytest.mark.readstream_relation("tiny")
        def test_fails(readstream_relation, readstream_faults, readstream_repro):
            readstream_repro.record(blocks=[0, 1, 2, 3, 7, 5], note="order matters")
            assert False
        """
    )
    result = pytester.runpytest("--readstream-seed=42")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = text[text.index("readstream reproduction") :].splitlines()[1:]
    section = section[: next(i for i, line in enumerate(section) if line.startswith("=="))]
    fields = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in section if ":" in line}
    # The launcher is how this (in-process) run was started: pytest, or python -m pytest.
    assert re.fullmatch(
        r"(pytest|\S*python\S* -m pytest) test_reproduction_section_is_copy_pasteable.py::test_fails "
        r"--readstream-seed=42 --readstream-impl=reference",
        fields["rerun"],
    ), fields["rerun"]
    import reference_impl
    from reference_impl import DEVICE_PROFILES, DeviceProfile, FaultPlan, Settings
    from reference_impl.relations import RelationSpec

    names = {
        "Settings": Settings,
        "DEVICE_PROFILES": DEVICE_PROFILES,
        "FaultPlan": FaultPlan,
        "RelationSpec": RelationSpec,
        "DeviceProfile": DeviceProfile,
    }
    assert eval(fields["settings"], names) == Settings(io_method="sync", io_combine_limit=4)
    assert eval(fields["storage"], names) == reference_impl.DEVICE_PROFILES["hdd"]
    plan = eval(fields["faults"], names)
    assert plan.faults == [reference_impl.Fault("latency", relation="tiny", block=2, extra_us=900)]
    assert eval(fields["relation"], names) == reference_impl.relations.SHAPES["tiny"]
    assert eval(fields["blocks"]) == [0, 1, 2, 3, 7, 5]
    result.stdout.fnmatch_lines(["note:*'order matters'"])


def test_factories_in_a_users_conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from reference_impl import Fault
        from pytest_readstream import factories

        sync_settings = factories.readstream_settings_factory(io_method="sync", shared_buffers="16MB")
        slow_disk = factories.readstream_storage_factory("hdd", jitter=0.5)
        flaky = factories.readstream_faults_factory(Fault("eio", relation="t", block=1))
        hdd_instance = factories.readstream_instance_factory(storage="hdd", settings={"io_method": "sync"})
        marker_instance = factories.readstream_instance_factory(storage="ram")
        shared_instance = factories.readstream_instance_factory(scope="module", settings={"io_combine_limit": 2})
        big = factories.readstream_relation_factory("bulk", nblocks=5000, instance="hdd_instance", name="big")
        mine = factories.readstream_relation_factory(nblocks=30, instance="hdd_instance", name="mine")
        shared_rel = factories.readstream_relation_factory("tiny", instance="shared_instance", scope="module")
        """
    )
    pytester.makepyfile(
        """
        import pytest

        def test_values(sync_settings, slow_disk, flaky):
            assert sync_settings.io_method == "sync" and sync_settings.shared_buffers == 2048
            assert slow_disk.name == "hdd(jitter=0.5)"
            assert flaky.faults[0].block == 1

        def test_fresh_plan_per_test(flaky):
            assert flaky.ledger == []

        def test_instance_and_relations(hdd_instance, big, mine, readstream_test_seed):
            assert hdd_instance.device.profile.name == "hdd"
            assert hdd_instance.settings.io_method == "sync"
            assert hdd_instance.relation("big") is big.heap and big.heap.nblocks() == 5000
            assert mine.spec.seed == readstream_test_seed and mine.heap.nblocks() == 30

        @pytest.mark.readstream_settings(io_method="sync")
        def test_defaults_honour_markers(marker_instance):
            assert marker_instance.settings.io_method == "sync"
            assert marker_instance.device.profile.name == "ram"

        def test_module_scope_1(shared_instance, shared_rel):
            assert shared_instance.relation("tiny") is shared_rel.heap

        def test_module_scope_2(shared_instance, shared_rel):
            assert shared_instance.relation("tiny") is shared_rel.heap
            assert shared_instance.settings.io_combine_limit == 2
        """
    )
    pytester.runpytest().assert_outcomes(passed=6)


def test_factory_arguments_are_checked_at_conftest_import(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_readstream import factories
        bad = factories.readstream_relation_factory("no-such-shape")
        """
    )
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret != 0
    assert "unknown relation shape 'no-such-shape': allowed tiny, small" in result.stderr.str()


def test_demo_implementation_passes_api_tests(pytester: pytest.Pytester, with_no_lookahead: str) -> None:
    pytester.makepyfile(
        """
        import pytest
        from reference_impl import INVALID_BUFFER, BlockRangeReadStreamPrivate, InvalidBlockNumber, block_range_read_stream_cb

        def consume(stream, backend):
            out = []
            while (buf := stream.next_buffer()) != INVALID_BUFFER:
                out.append(backend.buffer_block(buf))
                backend.release_buffer(buf)
            return out

        @pytest.mark.readstream_invariant("order", "MUST")
        @pytest.mark.parametrize("readstream_settings", [{"io_method": "sync"}, {"io_method": "worker"}], indirect=True)
        def test_every_block_in_order(readstream_relation, readstream_backend, readstream_stream_factory):
            blocks = [5, 6, 7, 100, 3, 3, 999]
            it = iter(blocks)
            stream = readstream_stream_factory(readstream_relation.heap, lambda s, p: next(it, InvalidBlockNumber))
            assert consume(stream, readstream_backend) == blocks
            stream.end()

        @pytest.mark.readstream_invariant("per-buffer-data", "MUST")
        def test_per_buffer_data(readstream_relation, readstream_backend, readstream_stream_factory):
            it = iter([(1, "a"), (2, "b")])
            stream = readstream_stream_factory(
                readstream_relation.heap, lambda s, p: next(it, InvalidBlockNumber), per_buffer_data=True
            )
            assert [stream.next_buffer_with_data()[1] for _ in range(2)] == ["a", "b"]
            for buf in list(readstream_backend.pinned_buffers()):
                readstream_backend.release_buffer(buf)
            stream.end()

        @pytest.mark.readstream_invariant("combining", "SHOULD")
        def test_reads_are_combined(readstream_relation, readstream_backend, readstream_stream_factory):
            stream = readstream_stream_factory(
                readstream_relation.heap, block_range_read_stream_cb, BlockRangeReadStreamPrivate(0, 64)
            )
            consume(stream, readstream_backend)
            stream.end()
            assert readstream_backend.stats.reads < 64

        @pytest.mark.readstream_requires("introspection")
        def test_limits(readstream_impl):
            pass
        """
    )
    result = pytester.runpytest(f"--readstream-impl={with_no_lookahead}", "-rs")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "combining*SHOULD*0*1*0*0*0*0",
            "order*MUST*2*0*0*0*0*0",
        ],
        consecutive=False,
    )
    result = pytester.runpytest("-rs")  # the reference passes everything
    result.assert_outcomes(passed=5)
