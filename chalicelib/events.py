"""Small readers of the Lambda events Chalice hands to the handlers."""

from __future__ import annotations

from datetime import UTC, datetime


def scheduled_time(event_time: str, fallback: datetime) -> datetime:
    """The scheduled event's time (EventBridge's ``time``, UTC), or ``fallback`` if unreadable."""
    try:
        parsed = datetime.fromisoformat(event_time.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return fallback
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
