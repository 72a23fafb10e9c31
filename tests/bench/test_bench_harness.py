"""The bench's shared code and P5 at tiny N: what every section relies on cannot rot."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from bench import __main__ as bench_main
from bench import core, results_page
from bench.cold_start import run as cold_start


def test_a_target_is_met_only_on_its_side_of_the_limit() -> None:
    assert core.Target("calls", 5, 5).met
    assert not core.Target("calls", 5.01, 5).met
    assert core.Target("rate", 0.8, 0.8, kind="min").met
    assert not core.Target("rate", 0.79, 0.8, kind="min").met
    assert "MISSED" in core.Target("calls", 9, 5).describe()


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert core.percentile(values, 50) == 50.0
    assert core.percentile(values, 99) == 99.0
    assert core.percentile(values, 100) == 100.0
    assert core.percentile([3.0], 99) == 3.0
    assert core.percentile([], 50) != core.percentile([], 50)  # NaN


def test_the_call_counter_counts_each_api_call_once_by_operation() -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        counter = core.CallCounter().attach(sqs)
        url = sqs.create_queue(QueueName="bench-count")["QueueUrl"]
        for _ in range(3):
            sqs.send_message(QueueUrl=url, MessageBody="x")
    assert counter.calls == {"sqs:CreateQueue": 1, "sqs:SendMessage": 3}
    assert counter.of("SendMessage") == 3
    assert counter.of("sqs:CreateQueue") == 1
    assert counter.reset()["sqs:SendMessage"] == 3
    assert counter.total == 0


def test_the_results_page_is_the_run_its_misses_and_every_section_from_the_results_alone(tmp_path: Path) -> None:
    results = {"date": "2026-11-23", "commit": "0123456789abcdef", "seconds": 12.0, "scale": "full",
               "machine": {"cpus": 2, "machine": "x86_64", "python": "3.11.7", "platform": "Linux"},
               "sections": [core.Section("P9", "a test", ["n", "calls"], rows=[[10, 5]],
                                         targets=[core.Target("calls", 5, 4), core.Target("bytes", 1, 2)],
                                         notes=["a note"]).to_json()]}
    page = tmp_path / "benchmark-results.md"
    results_page.update(page, results)
    text = page.read_text()
    assert text == results_page.render_page(results)
    assert text.startswith("# Benchmark results\n\n" + results_page.MARKER + "\n")
    assert "2026-11-23 at commit `0123456789ab`" in text and "1 of 2 targets met" in text
    missed = text[text.index("## Missed targets"):text.index("## Sections")]
    assert "- P9, calls: 5 (target <= 4) MISSED" in missed and "bytes" not in missed
    assert "| 10 | 5 |" in text and "- a note" in text and "bytes: 1 (target <= 2) met" in text
    del results["commit"]
    assert " at commit" not in results_page.render_page(results)


def test_the_benchmark_results_page_is_generated_from_the_committed_results() -> None:
    """No bench run: the committed page must equal the generator's output on the committed results.json."""
    assert results_page.PAGE == core.PROJECT / "docs" / "benchmark-results.md"
    results = json.loads(core.RESULTS.read_text())
    assert results["scale"] == "full", "bench/results.json must come from a full `make bench`"
    page = results_page.PAGE.read_text()
    assert page == results_page.render_page(results), \
        "docs/benchmark-results.md differs from bench/results.json: regenerate it with " \
        "`python -c 'import json; from bench import core, results_page as r; " \
        "r.update(r.PAGE, json.loads(core.RESULTS.read_text()))'`"
    for section in results["sections"]:
        for plot in section["plots"]:
            assert (core.PROJECT / plot).is_file(), f"{plot} is shown in docs/benchmark-results.md but not committed"
            assert f"]({results_page.page_link(plot)})" in page
            assert (results_page.PAGE.parent / results_page.page_link(plot)).resolve() == (core.PROJECT / plot).resolve()


def test_cold_start_at_tiny_scale_measures_both_imports_and_names_the_slowest(tmp_path: Path) -> None:
    [section] = cold_start(core.TINY, tmp_path)
    boto_row, app_row = section.rows
    assert boto_row[0] == "boto3" and app_row[0] == "app"
    assert app_row[1] > 0 and boto_row[1] > 0
    assert section.figures["ratio"] == pytest.approx(app_row[1] / boto_row[1])
    assert section.targets[0].limit == 1.2
    assert "botocore" in section.figures["slowest_imports_ms"]


def test_the_command_line_refuses_an_unknown_section() -> None:
    with pytest.raises(SystemExit):
        bench_main.main(["--only", "P42", "--no-page"])


def test_the_command_line_writes_results_it_can_render(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    assert bench_main.main(["--only", "P5", "--scale", "tiny", "--out", str(out), "--plots", str(tmp_path),
                            "--no-page"]) == 0
    results = json.loads(out.read_text())
    assert results["scale"] == "tiny" and [s["key"] for s in results["sections"]] == ["P5"]
    assert results["commit"] and results_page.MARKER in results_page.render_page(results)


def test_a_quick_run_writes_out_of_tree_and_never_over_the_committed_full_run() -> None:
    args = bench_main.arguments([], {"BENCH_QUICK": "1"})
    assert args.scale == "quick"
    assert args.out == core.PROJECT / ".local" / "bench-quick" / "results.json"
    assert args.plots == core.PROJECT / ".local" / "bench-quick"
    assert core.PROJECT / ".local" in args.out.parents  # gitignored


@pytest.mark.parametrize("argv, environ", [
    ([], {}),                                                # make bench: the full run
    (["--in-tree"], {"BENCH_QUICK": "1"}),                   # asked for
    ([], {"BENCH_QUICK": "1", "BENCH_IN_TREE": "1"}),
])
def test_a_full_run_or_one_asked_to_writes_the_committed_figures(argv: list[str], environ: dict[str, str]) -> None:
    args = bench_main.arguments(argv, environ)
    assert (args.out, args.plots) == (core.RESULTS, core.PLOTS)


def test_out_and_plots_given_on_the_command_line_win(tmp_path: Path) -> None:
    args = bench_main.arguments(["--scale", "tiny", "--out", str(tmp_path / "r.json"), "--plots", str(tmp_path)], {})
    assert (args.out, args.plots) == (tmp_path / "r.json", tmp_path)
