"""Seed selection for the simulation: `--sim-seeds=N` runs seeds 0..N-1 (default 500),
`--sim-seed=K` (repeatable) runs exactly those seeds, to reproduce a failure. The terminal
summary says how many fault schedules ran and passed."""

from __future__ import annotations

import pytest

DEFAULT_SEEDS = 500


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simulation", "deterministic replication simulation")
    group.addoption(
        "--sim-seeds",
        type=int,
        default=None,
        help=f"run simulation seeds 0..N-1 (default {DEFAULT_SEEDS})",
    )
    group.addoption(
        "--sim-seed",
        type=int,
        action="append",
        default=None,
        help="run only this simulation seed (repeatable); a failure prints its seed",
    )


def selected_seeds(config: pytest.Config) -> list[int]:
    # getoption's default covers a run that did not load this conftest at start-up (then the
    # options are unknown), e.g. `pytest tests` from the repository root.
    chosen = config.getoption("--sim-seed", default=None)
    if chosen:
        return list(chosen)
    count = config.getoption("--sim-seeds", default=None)
    return list(range(DEFAULT_SEEDS if count is None else count))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sim_seed" in metafunc.fixturenames:
        seeds = selected_seeds(metafunc.config)
        metafunc.parametrize("sim_seed", seeds, ids=[f"seed_{s}" for s in seeds])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    ran = [
        r
        for key in ("passed", "failed")
        for r in terminalreporter.stats.get(key, [])
        if getattr(r, "when", "call") == "call" and "::test_seed[" in r.nodeid
    ]
    if ran:
        failed = sum(1 for r in ran if r.failed)
        terminalreporter.write_line(
            f"simulation: {len(ran)} seeded fault schedules ran, {failed} failed"
        )
