"""The documentation stays true: every relative link of README.md and docs/*.md leads to a file (and, with
an ``#anchor``, to a heading of it), docs/configuration.md's tables list exactly the settings the code
reads, and the README stays short enough to read in ten minutes."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote

import pytest

from bench import settings_table
from chalicelib.settings import VARIABLES, Settings, Variable
from deploy import event_sources, iam
from local.stage import LOCAL_VARIABLES, LocalSettings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README_MAX_WORDS = 1000

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_ROW = re.compile(r"^\| `([A-Z_]+)` \| ([^|]*) \|", re.MULTILINE)


def prose(text: str) -> str:
    """The page without its fenced code blocks (a ``[x](y)`` there is code, not a link)."""
    return _FENCE.sub("", text)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens, and
    ``-1``, ``-2``... for a heading text seen before."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(text), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> Iterator[str]:
    for target in _LINK.findall(prose(page.read_text())):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked here
            yield target


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def broken_links(page: Path) -> list[str]:
    broken = []
    for link in relative_links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / unquote(path)).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no file {shown(target)}")
        elif anchor and (target.suffix != ".md" or anchor not in anchors(target.read_text())):
            broken.append(f"{link}: no heading #{anchor} in {shown(target)}")
    return broken


def section(text: str, heading: str) -> str:
    """The text under the ``## heading`` (up to the next ``## ``)."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"docs/configuration.md has no section '## {heading}'"
    return match.group(1)


def rows(text: str) -> dict[str, str]:
    """``| `NAME` | default | meaning |`` rows: the default column by name."""
    return {name: default.strip() for name, default in _ROW.findall(text)}


class RecordingEnviron(Mapping[str, str]):
    """An empty environment that remembers every name it was asked for."""

    def __init__(self) -> None:
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        raise KeyError(key)

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return default

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return False

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A `make run` section: here\n")
    page.write_text("# Page\n\n[ok](other.md#a-make-run-section-here) [self](#page) [web](https://example.com)\n"
                    "[gone](missing.md) [no heading](other.md#nowhere)\n\n```\n[code](not-a-link.md)\n```\n")
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#nowhere"]


def test_the_readme_links_every_page_under_docs() -> None:
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in relative_links(ROOT / "README.md")}
    # Pages other branches add are linked when they are merged; every page of this list must be.
    mine = {"backups", "backups-guarantees", "tasks", "strategies", "executor", "offline", "offline-runtime",
            "deploying", "security", "configuration", "operations-runbook", "testing", "benchmarks",
            "benchmark-results"}
    assert {(ROOT / "docs" / f"{name}.md").resolve() for name in mine} <= linked


def test_the_readme_reads_in_ten_minutes() -> None:
    words = len((ROOT / "README.md").read_text().split())
    assert words <= README_MAX_WORDS, f"README.md has {words} words; move depth to docs/ (at most {README_MAX_WORDS})"


def stage_row(variable: Variable) -> str:
    """The configuration table's row of a declared setting: name, default and meaning as declared."""
    return f"| `{variable.name}` | {f'`{variable.default}`' if variable.default else '(empty)'} | {variable.meaning} |"


def test_the_stage_settings_table_is_the_declared_settings_name_default_and_meaning() -> None:
    documented = [line for line in section(CONFIGURATION.read_text(), "Stage settings (the app's)").splitlines()
                  if _ROW.match(line)]
    declared = [stage_row(variable) for variable in VARIABLES]
    missing = [row for row in declared if row not in documented]
    assert not missing, "docs/configuration.md's stage table lacks (or words otherwise) these declared rows:\n" + \
        "\n".join(missing)
    assert documented == declared, "docs/configuration.md's stage table has rows the settings do not declare, " \
        "or another order than chalicelib/settings.py"


def test_the_table_check_sees_a_changed_meaning() -> None:
    variable = VARIABLES[0]
    changed = variable._replace(meaning=variable.meaning + " (changed)")
    assert stage_row(changed) not in section(CONFIGURATION.read_text(), "Stage settings (the app's)")


def test_the_configuration_page_is_what_bench_settings_table_renders() -> None:
    text = CONFIGURATION.read_text()
    assert settings_table.MARK in text
    assert settings_table.render(text) == text, "run .venv/bin/python -m bench.settings_table"
    first = VARIABLES[0]
    tampered = text.replace(settings_table.row(first), settings_table.row(first._replace(meaning="Changed.")))
    assert tampered != text and settings_table.render(tampered) == text


def test_settings_read_exactly_the_declared_variables() -> None:
    environ = RecordingEnviron()
    Settings.from_env(environ)
    declared = {variable.name for variable in VARIABLES}
    assert environ.read - {"AWS_DEFAULT_REGION"} <= declared, "Settings reads a variable nobody declares"
    assert declared <= environ.read, "a declared setting is never read"


def test_the_deploy_time_table_lists_exactly_make_deploys_settings() -> None:
    documented = rows(section(CONFIGURATION.read_text(), "Deploy-time settings (`make deploy`'s environment)"))
    assert set(documented) == {o.name for o in (*event_sources.OPTIONS, *iam.OPTIONS)}


def test_the_offline_table_lists_exactly_the_local_runtimes_variables() -> None:
    documented = rows(section(CONFIGURATION.read_text(), "The offline runtime (`make run`, `make demo`)"))
    assert documented == {name: f"`{default}`" for name, default in LOCAL_VARIABLES.items()}
    environ = RecordingEnviron()
    LocalSettings.from_env(environ)
    assert environ.read == set(documented), "LocalSettings reads a variable the table does not list, or not one it does"


def test_operations_metrics_table_lists_every_metric_the_app_declares_with_its_count() -> None:
    from chalicelib import metrics as m

    declared = {value for name, value in vars(m).items()
                if name.isupper() and name.startswith(("TASK", "BACKUP")) and isinstance(value, str)}
    text = (ROOT / "docs" / "operations.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \| (?:Count|Milliseconds|Seconds) \|", text, re.MULTILINE))
    assert listed == declared
    tasks = sum(1 for name in declared if name.startswith("Task"))
    assert f"{tasks} task metrics x 4 strategies" in text and f"{len(declared) - tasks} backup metrics" in text


def test_operations_says_which_metrics_are_read_from_the_executors_line_by_metric_filters() -> None:
    """Derived from chalicelib/metrics.py LINE_METRICS: each such metric's row says so, with its filter's pattern."""
    from chalicelib import metrics as m

    text = (ROOT / "docs" / "operations.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (?:Count|Milliseconds|Seconds) \|(.*)$", text, re.MULTILINE))
    for name, row in rows.items():
        assert ("metric filter" in row) == (name in m.LINE_METRIC_NAMES), name
    for metric in m.LINE_METRICS:
        assert f"`{metric.filter_pattern}`" in text, metric.filter_pattern


def test_readmes_known_misses_names_every_target_the_committed_bench_missed_with_its_figure() -> None:
    """README's Known misses lists what the last committed `make bench` (bench/results.json) missed: the count,
    and each missed target's figure as the bench prints it (two decimals), so a run that changes them and a
    README left as it was fail here."""
    import json

    results = json.loads((ROOT / "bench" / "results.json").read_text())
    targets = [t for section in results["sections"] for t in section.get("targets", [])]
    missed = [t for t in targets if not t["met"]]
    readme = (ROOT / "README.md").read_text()
    known = " ".join(readme[readme.index("## Known misses"):readme.index("## Read next")].split())
    assert f"{len(missed)} of {len(targets)} missed" in known
    for target in missed:
        assert f"{target['figure']:.2f}" in known, target["name"]


def test_every_yes_of_the_eventbridge_scheduler_table_names_a_test_that_exists() -> None:
    """docs/tasks.md "Compared with EventBridge Scheduler": each row that says yes names the test behind it."""
    text = (ROOT / "docs" / "tasks.md").read_text()
    table = text.split("### Compared with EventBridge Scheduler", 1)[1].split("\n### ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) >= 5
    for option, answer, test in rows:
        if not answer.startswith("yes"):
            continue
        path, _, name = test.strip("| `").partition("::")
        assert name and f"def {name}(" in (ROOT / path).read_text(), option
