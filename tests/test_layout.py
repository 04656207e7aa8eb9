"""The package's shape: README "Layout" names every module (and no module that is gone), no
module is over 400 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "streameval"
MAX_LINES = 400


def _layout() -> str:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## Layout")
    return readme[start : readme.index("```", readme.index("```", start) + 3)]


def _modules() -> set[str]:
    """package-relative module names: 'cli.py', 'kafka/loop.py' (``__init__``/``__main__`` left out)."""
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if not p.name.startswith("__") and "build" not in p.parts
    }


def test_the_readme_layout_names_every_module_and_only_those() -> None:
    layout = _layout()
    named: set[str] = set()  # "kafka/loop.py" for a name on the lines of kafka/
    folder = ""
    for line in layout.splitlines():
        top = re.match(r"^  ([a-z_]+/)", line)
        if top:
            folder = top.group(1)
        elif re.match(r"^  [a-z_]+\.py", line):
            folder = ""
        for name in re.findall(r"\b([a-z_]+\.py)\b", line):
            named.add(folder + name if folder and not re.match(rf"^  {re.escape(name)}", line) else name)
    assert _modules() - named == set(), "modules the README's Layout does not name"
    assert {n for n in named if "/" in n or (PACKAGE / n).suffix} - _modules() - {"setup.py"} == set()


def test_no_module_is_over_400_lines() -> None:
    long = {m: n for m in _modules() if (n := len((PACKAGE / m).read_text().splitlines())) > MAX_LINES}
    assert long == {}
