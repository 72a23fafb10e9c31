"""The bench block of docs/benchmarks.md: the latest full run's tables, its date and machine, and the plots.

It lives between two markers in docs/benchmarks.md (PAGE) and is rewritten by ``make bench`` (full
scale, every section); tests/bench/test_bench_harness.py keeps it equal to bench/results.json.  Plots
are linked relative to the page (results.json names them from the project's root).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from bench import core

START = "<!-- bench:start (written by make bench from bench/results.json; do not edit) -->"
END = "<!-- bench:end -->"
PAGE = core.PROJECT / "docs" / "benchmarks.md"


def section_from_json(data: dict[str, Any]) -> core.Section:
    targets = [core.Target(name=t["name"], figure=t["figure"], limit=t["limit"], unit=t["unit"], kind=t["kind"])
               for t in data["targets"]]
    return core.Section(key=data["key"], title=data["title"], columns=data["columns"], rows=data["rows"],
                        targets=targets, notes=data["notes"], figures=data["figures"], plots=data["plots"])


def render_block(results: dict[str, Any]) -> str:
    m = results["machine"]
    sections = [section_from_json(s) for s in results["sections"]]
    met = sum(t.met for s in sections for t in s.targets)
    total = sum(len(s.targets) for s in sections)
    lines = [START, "",
             f"Latest `make bench`: {results['date']}, {m['cpus']} CPUs, {m['machine']}, Python {m['python']} "
             f"({m['platform']}); {results['seconds']:.0f} s; {met} of {total} targets met.", ""]
    for section in sections:
        lines.extend(core.render(section))
        lines.extend(f"![{section.key}]({page_link(plot)})" for plot in section.plots)
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def page_link(plot: str) -> str:
    """A plot's path (from the project's root) as PAGE links it."""
    return Path(os.path.relpath(core.PROJECT / plot, PAGE.parent)).as_posix()


def replace_block(text: str, block: str) -> str:
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"the page has no bench block: add the two markers {START!r} and {END!r}")
    return pattern.sub(lambda _: block, text, count=1)


def current_block(text: str) -> str | None:
    match = re.search(re.escape(START) + ".*?" + re.escape(END), text, re.DOTALL)
    return match.group(0) if match else None


def update(page: Path, results: dict[str, Any]) -> None:
    page.write_text(replace_block(page.read_text(), render_block(results)))
