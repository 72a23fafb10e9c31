"""`make bench`: every section of the bench in one run; a table on stdout,
bench/results.json, plots under docs/bench/ and docs/benchmark-results.md (generated from results.json).

A smaller run (quick or tiny) never overwrites the committed full-run figures: its results.json and
plots go to .local/bench-<scale>/ (gitignored; printed at the end), unless --in-tree (or
BENCH_IN_TREE=1) asks for bench/ and docs/bench/.  --out and --plots choose any place.

    .venv/bin/python -m bench                      # full (make bench, under 20 minutes on 2 cores)
    BENCH_QUICK=1 .venv/bin/python -m bench        # smaller N, same code (under 2 minutes): .local/bench-quick/
    .venv/bin/python -m bench --only P1,P5         # some sections
    .venv/bin/python -m bench --scale tiny --out /tmp/b --no-page     # what the suite runs
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench import core, results_page
from bench.core import Scale, Section

#: Section keys and the module that runs them; each module has ``run(scale, plots) -> list[Section]``.
MODULES: dict[str, str] = {
    "P1": "bench.backups",
    "P2": "bench.stream_batch",
    "P3": "bench.precision",
    "P4": "bench.task_cost",
    "P4k": "bench.hot_keys",
    "T": "bench.throughput",
    "B": "bench.burst",
    "P5": "bench.cold_start",
}


def runner(key: str) -> Callable[[Scale, Path], list[Section]]:
    module = importlib.import_module(MODULES[key])
    run: Callable[[Scale, Path], list[Section]] = module.run
    return run


def run(keys: Sequence[str], scale: Scale, out: Path, plots: Path) -> dict[str, object]:
    plots.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    sections: list[Section] = []
    for key in keys:
        print(f"# {key} ({MODULES[key]}, scale {scale.name}) ...", file=sys.stderr, flush=True)
        for section in runner(key)(scale, plots):
            sections.append(section)
            print("\n".join(core.render(section)) + "\n", flush=True)
    results: dict[str, object] = {
        "date": started.strftime("%Y-%m-%d"),
        "started": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "scale": scale.name,
        "machine": core.machine(),
        "commit": commit(),
        "sections": [section.to_json() for section in sections],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    missed = [t for s in sections for t in s.targets if not t.met]
    print(f"{sum(len(s.targets) for s in sections) - len(missed)} targets met, {len(missed)} missed; "
          f"{results['seconds']} s; results in {out}, plots in {plots}", flush=True)
    return results


def commit(project: Path = core.PROJECT) -> str | None:
    """The commit the run measured (HEAD), or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def destinations(scale: str, in_tree: bool, project: Path = core.PROJECT) -> tuple[Path, Path]:
    """(results.json, plots directory) of a run: the committed ones for a full run or when asked, else a
    directory of their own under .local/ (gitignored), so a smaller run never replaces the full run's."""
    if scale == "full" or in_tree:
        return project / core.RESULTS.relative_to(core.PROJECT), project / core.PLOTS.relative_to(core.PROJECT)
    elsewhere = project / ".local" / f"bench-{scale}"
    return elsewhere / "results.json", elsewhere


def arguments(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """The command line, with --out and --plots resolved (``destinations`` unless given)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(MODULES), help="comma-separated section keys")
    parser.add_argument("--scale", choices=("full", "quick", "tiny"),
                        default="quick" if environ.get("BENCH_QUICK") == "1" else "full")
    parser.add_argument("--out", type=Path, help="results.json path (default: bench/results.json for a full "
                                                 "run, else .local/bench-<scale>/results.json)")
    parser.add_argument("--plots", type=Path, help="directory for the plots (default: docs/bench/ for a full "
                                                   "run, else .local/bench-<scale>/)")
    parser.add_argument("--in-tree", action="store_true", default=environ.get("BENCH_IN_TREE") == "1",
                        help="a quick or tiny run writes bench/results.json and docs/bench/ too (BENCH_IN_TREE=1)")
    parser.add_argument("--no-page", "--no-readme", dest="no_page", action="store_true",
                        help="leave docs/benchmark-results.md alone")
    args = parser.parse_args(argv)
    out, plots = destinations(args.scale, args.in_tree)
    args.out = args.out or out
    args.plots = args.plots or plots
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv, os.environ)
    keys = [key.strip() for key in args.only.split(",") if key.strip()]
    unknown = [key for key in keys if key not in MODULES]
    if unknown:
        raise SystemExit(f"python -m bench: unknown section(s) {unknown}; known: {list(MODULES)}")
    results = run(keys, Scale(args.scale), args.out, args.plots)
    if not args.no_page and args.scale == "full" and keys == list(MODULES):
        results_page.update(results_page.PAGE, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
