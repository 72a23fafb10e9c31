"""The README's bench block: the latest full run's tables, its date and machine, and the plots.

It lives between two markers in README.md and is rewritten by ``make bench`` (full scale,
every section); tests/unit/test_bench_readme.py keeps it equal to bench/results.json.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from bench import core

START = "<!-- bench:start (written by make bench from bench/results.json; do not edit) -->"
END = "<!-- bench:end -->"


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
        lines.extend(f"![{section.key}]({plot})" for plot in section.plots)
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"README.md has no bench block: add the two markers {START!r} and {END!r}")
    return pattern.sub(lambda _: block, text, count=1)


def current_block(text: str) -> str | None:
    match = re.search(re.escape(START) + ".*?" + re.escape(END), text, re.DOTALL)
    return match.group(0) if match else None


def update(readme: Path, results: dict[str, Any]) -> None:
    readme.write_text(replace_block(readme.read_text(), render_block(results)))
