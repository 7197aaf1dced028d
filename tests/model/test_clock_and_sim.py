"""Virtual clock and the deterministic scheduler of concurrent simulated processes."""

from __future__ import annotations

import pytest

from reference_impl import ModelUsageError, Simulation, VirtualClock


def test_clock_never_goes_back() -> None:
    c = VirtualClock()
    c.advance(10)
    c.wait_until(5)
    assert c.now == 10
    with pytest.raises(ModelUsageError):
        c.advance(-1)


def test_processes_interleave_in_virtual_time_order() -> None:
    clock = VirtualClock()
    log: list[tuple[str, int]] = []

    def proc(name: str, step: int, n: int):
        def run() -> str:
            for _ in range(n):
                clock.advance(step)
                log.append((name, clock.now))
            return name

        return run

    sim = Simulation(clock)
    sim.spawn(proc("a", 3, 4), name="a")
    sim.spawn(proc("b", 5, 3), name="b")
    assert sim.run() == ["a", "b"]
    times = [t for _, t in log]
    assert times == sorted(times)  # the clock only moves forward across processes
    assert clock.now == 15


def test_simulation_is_deterministic_and_reraises_errors() -> None:
    def run_once() -> list[int]:
        clock = VirtualClock()
        seen: list[int] = []

        def p(k: int):
            def body() -> None:
                for i in range(5):
                    clock.advance(k + i)
                    seen.append(k * 100 + i)

            return body

        sim = Simulation(clock)
        for k in (1, 2, 3):
            sim.spawn(p(k))
        sim.run()
        return seen

    assert run_once() == run_once()

    clock = VirtualClock()
    sim = Simulation(clock)

    def boom() -> None:
        clock.advance(1)
        raise ValueError("inside")

    sim.spawn(boom)
    with pytest.raises(ValueError, match="inside"):
        sim.run()
