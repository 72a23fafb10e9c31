"""Log lines never take a handler down, and the suite logs at the level every stage ships."""

from __future__ import annotations

import ast
import io
import json
import logging
import os
from pathlib import Path

from chalicelib.log import RESERVED, SafeLogger, logger, safe_extra

ROOT = Path(__file__).resolve().parents[2]
PARAMETERS = {"exc_info", "stack_info", "stacklevel"}  # logging's own keyword parameters, not fields


def test_the_suite_runs_at_the_log_level_every_stage_ships() -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    shipped = {config["environment_variables"]["LOG_LEVEL"]} | {
        stage.get("environment_variables", {}).get("LOG_LEVEL", config["environment_variables"]["LOG_LEVEL"])
        for stage in config["stages"].values()}
    assert shipped == {"INFO"}
    assert os.environ["LOG_LEVEL"] == "INFO"
    assert logger.log_level == logging.INFO


def test_an_extra_key_naming_a_log_record_attribute_is_renamed_not_raised() -> None:
    out = io.StringIO()
    log = SafeLogger(service="log-test", level="INFO", logger_handler=logging.StreamHandler(out))
    for key in sorted(RESERVED):
        log.info("line", extra={key: "value", "kept": 1})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == len(RESERVED)
    assert lines[0]["kept"] == 1
    assert {line["message"] for line in lines} == {"line"}
    assert lines[sorted(RESERVED).index("created")]["created_"] == "value"


def test_keyword_fields_are_renamed_too() -> None:
    assert safe_extra({"created": 1}, {"module": "m", "table": "t"}) == {"created_": 1, "module_": "m", "table": "t"}


def _logging_calls_with_reserved_keys(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            keys: list[str] = []
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                keys = [k.value for k in keyword.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            elif keyword.arg in RESERVED - PARAMETERS and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in {"debug", "info", "warning", "error", "exception", "critical"}:
                keys = [keyword.arg]
            bad = [k for k in keys if k in RESERVED]
            if bad:
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno} {bad}")
    return found


def test_no_logging_call_in_the_code_uses_a_reserved_key() -> None:
    sources = [ROOT / "app.py", *[p for d in ("chalicelib", "local", "deploy") for p in (ROOT / d).rglob("*.py")]]
    assert [hit for path in sources for hit in _logging_calls_with_reserved_keys(path)] == []


def test_the_logging_call_check_finds_a_reserved_key_in_extra_or_as_a_keyword(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("logger.info('fine', extra={'run_id': 1})\n"
                       "logger.info('clash', extra={'name': 1, 'table': 't'})\n"
                       "logger.warning('clash', module='m', exc_info=True)\n")
    assert _logging_calls_with_reserved_keys(planted) == ["planted.py:2 ['name']", "planted.py:3 ['module']"]
