"""Names every layer shares, from the settings down to the actions (the settings re-export them)."""

from __future__ import annotations

# Chalice names a stage's functions <APP_NAME>-<stage>...; its queues and topics are named <APP_NAME>-...
# (chalicelib/settings.py OWN_QUEUES, chalicelib/tasks/actions/targets.py ``app_targets``).
APP_NAME = "timekeeper"
