"""The stage's retention policy, as the monitor, the catalog and the exports apply it."""

from __future__ import annotations

from datetime import timedelta

from chalicelib.backups import rules
from chalicelib.settings import Settings


def retention_policy(settings: Settings) -> rules.Policy:
    """The stage's retention: BACKUP_RETENTION_DAYS, BACKUP_MIN_KEEP and the calendar of BACKUP_RETENTION."""
    calendar = settings.backup_retention
    return rules.Policy(age=timedelta(days=settings.backup_retention_days), min_keep=settings.backup_min_keep,
                        daily=calendar.daily, weekly=calendar.weekly, monthly=calendar.monthly,
                        yearly=calendar.yearly, zone=settings.backup_timezone)
