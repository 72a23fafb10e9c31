"""docs/configuration.md's table of stage settings, rendered from chalicelib/settings.py's VARIABLES.

The table lies between two markers of the page; the rest of the page is written by hand.
tests/unit/test_docs.py compares the committed page with what this module renders, so the table cannot go
stale.

    .venv/bin/python -m bench.settings_table      # rewrites the table in docs/configuration.md
"""

from __future__ import annotations

from pathlib import Path

from chalicelib.settings import VARIABLES, Variable

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
MARK = "<!-- its stage settings table is rendered by bench.settings_table (the rest of the page is written by hand) -->"
BEGIN, END = "<!-- settings table: begin -->", "<!-- settings table: end -->"


def row(variable: Variable) -> str:
    """A declared setting's row: name, default (or "(empty)") and meaning, as declared."""
    default = f"`{variable.default}`" if variable.default else "(empty)"
    return f"| `{variable.name}` | {default} | {variable.meaning} |"


def table() -> str:
    return "\n".join(["| name | default | meaning |", "| --- | --- | --- |", *map(row, VARIABLES)])


def render(page: str) -> str:
    """``page`` with the text between its markers replaced by the declared table. Pure."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end and MARK in head):
        raise ValueError(f"the page lacks {MARK}, {BEGIN} or {END}")
    return f"{head}{BEGIN}\n{table()}\n{END}{tail}"


def main() -> None:
    PAGE.write_text(render(PAGE.read_text()))


if __name__ == "__main__":
    main()
