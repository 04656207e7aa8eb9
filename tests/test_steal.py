"""The benchmarks' reading of CPU time stolen by a hypervisor (``benchmarks/steal.py``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.steal import StealMeter, cpu_jiffies


def _stat(path: Path, steal: int, busy: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice; guest is counted in user
    path.write_text(f"cpu  {busy} 0 0 1000 0 0 0 {steal} 77 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")


def test_the_steal_column_and_the_total_of_the_first_eight(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, steal=50, busy=150)
    assert cpu_jiffies(stat) == (50, 1200)


def test_the_share_stolen_since_the_meter_was_made(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, steal=50, busy=150)
    meter = StealMeter(stat)
    assert meter.percent() is None  # no time counted yet
    _stat(stat, steal=80, busy=220)  # 30 stolen of 100 (30 + 70; idle unchanged)
    assert meter.percent() == 30.0
    _stat(stat, steal=80, busy=320)  # nothing more stolen: 30 of 200
    assert meter.percent() == 15.0


def test_unknown_without_the_steal_column(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4\n")
    assert cpu_jiffies(stat) is None and StealMeter(stat).percent() is None
    assert cpu_jiffies(tmp_path / "missing") is None
