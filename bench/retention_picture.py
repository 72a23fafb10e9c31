"""The picture of docs/backups.md's retention by calendar: which of a year of daily backups a policy keeps.

One square a day (weeks in columns, Monday on top, as a calendar), coloured by the first rule that keeps
that day's backup (rules.retention_verdicts, the code retention runs), grey when retention deletes it.
Plain SVG text, the same bytes on every run: tests/unit/test_retention_picture.py compares the committed
file with what this module draws, so the picture cannot go stale.

    .venv/bin/python -m bench.retention_picture      # rewrites docs/retention-calendar.svg
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from chalicelib.backups.rules import Backup, Keep, Policy, backup_name, retention_verdicts

PICTURE = Path(__file__).resolve().parent.parent / "docs" / "retention-calendar.svg"
NOW = datetime(2026, 11, 22, 3, 30, tzinfo=UTC)  # a run that finishes half an hour after the 03:00 backup
POLICY = Policy(age=timedelta(days=3), min_keep=2, daily=7, weekly=4, monthly=12, yearly=3)
PREFIX, TABLE = "timekeeper-prod", "orders"
COLOURS = {Keep.LAST_GOOD: "#1b5e20", Keep.YEARLY: "#6a1b9a", Keep.MONTHLY: "#1565c0", Keep.WEEKLY: "#00897b",
           Keep.DAILY: "#f9a825", Keep.AGE: "#ef6c00", None: "#e0e0e0"}
CELL, GAP, LEFT, TOP = 12, 2, 36, 40


def year_of_daily_backups(now: datetime = NOW) -> list[Backup]:
    out = []
    for day in range(365):
        created = now.replace(hour=3, minute=0) - timedelta(days=day)
        out.append(Backup(arn=f"b{day:03d}", name=backup_name(PREFIX, TABLE, created), table=TABLE, created=created,
                          status="AVAILABLE", type="USER"))
    return out


def draw(policy: Policy = POLICY, now: datetime = NOW) -> str:
    """The SVG text."""
    verdicts = retention_verdicts(year_of_daily_backups(now), now, policy, PREFIX, [TABLE])
    first = min(v.backup.created for v in verdicts).date()
    monday = first - timedelta(days=first.weekday())
    weeks = (now.date() - monday).days // 7 + 1
    width, height = LEFT + weeks * (CELL + GAP) + 10, TOP + 7 * (CELL + GAP) + 70
    rules_text = f"BACKUP_RETENTION=daily={policy.daily},weekly={policy.weekly},monthly={policy.monthly}," \
                 f"yearly={policy.yearly}  BACKUP_RETENTION_DAYS={policy.age.days}  BACKUP_MIN_KEEP={policy.min_keep}"
    kept = sum(1 for v in verdicts if v.kept)
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<title>Which of a year of daily backups retention keeps: {kept} of {len(verdicts)}</title>',
        f'<text x="{LEFT}" y="14">{rules_text}</text>',
        f'<text x="{LEFT}" y="28">a year of daily backups up to {now:%Y-%m-%d} (UTC): {kept} of '
        f'{len(verdicts)} kept</text>',
    ]
    for row, name in enumerate(("Mon", "", "Wed", "", "Fri", "", "Sun")):
        if name:
            lines.append(f'<text x="4" y="{TOP + row * (CELL + GAP) + CELL - 2}">{name}</text>')
    month = None
    for v in sorted(verdicts, key=lambda v: v.backup.created):
        day = v.backup.created.date()
        column, row = (day - monday).days // 7, day.weekday()
        x, y = LEFT + column * (CELL + GAP), TOP + row * (CELL + GAP)
        if (day.month != month and row == 0) or month is None:
            month = day.month
            lines.append(f'<text x="{x}" y="{TOP - 3}" font-size="9">{day:%b}</text>')
        reason = v.kept[0] if v.kept else None
        why = ", ".join(k.value for k in v.kept) or "deleted"
        lines.append(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{COLOURS[reason]}">'
                     f'<title>{day:%Y-%m-%d}: {why}</title></rect>')
    y = TOP + 7 * (CELL + GAP) + 16
    x = LEFT
    for reason, colour in COLOURS.items():
        label = reason.value if reason else "deleted"
        lines.append(f'<rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="{colour}"/>')
        lines.append(f'<text x="{x + CELL + 4}" y="{y + CELL - 2}">{label}</text>')
        x += CELL + 12 + 7 * len(label)
    lines.append(f'<text x="{LEFT}" y="{y + CELL + 22}">each square: that day\'s backup, coloured by the first '
                 'rule that keeps it (last_good, yearly, monthly, weekly, daily, age)</text>')
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


def main() -> None:
    PICTURE.write_text(draw())
    print(f"wrote {PICTURE}")


if __name__ == "__main__":
    main()
