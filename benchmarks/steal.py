"""CPU time the hypervisor gave to others: the ``steal`` column of ``/proc/stat``.

On a virtual machine a neighbour can take a share of the CPUs, and that share moves from one
minute to the next. Each ratio of figure 2 compares two processes timed a minute apart, so a
round in which the share moved is noisier than one without: each round of figure 2 keeps the
share it saw, and the rendered table says how much was taken while the figures ran.
"""

from __future__ import annotations

from pathlib import Path

STAT = Path("/proc/stat")


def cpu_jiffies(stat: Path = STAT) -> tuple[int, int] | None:
    """(stolen, total) CPU time of all CPUs since boot, in jiffies; None where there is no
    /proc/stat or its first line has no steal column (not Linux, or a kernel before 2.6.11)."""
    try:
        first = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if len(first) < 9 or first[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already
    # counted in user and nice, so the total is of the first eight
    times = [int(x) for x in first[1:9]]
    return times[7], sum(times)


class StealMeter:
    """The share of CPU time stolen since it was made."""

    def __init__(self, stat: Path = STAT) -> None:
        self.stat = stat
        self.start = cpu_jiffies(stat)

    def percent(self) -> float | None:
        """Stolen / all CPU time since the start, in percent; None without the steal column or
        when no time was counted yet."""
        now = cpu_jiffies(self.stat)
        if self.start is None or now is None:
            return None
        stolen, total = now[0] - self.start[0], now[1] - self.start[1]
        return round(100.0 * stolen / total, 1) if total > 0 else None
