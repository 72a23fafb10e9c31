"""Scheduled on-demand backups: trigger, monitor, retention."""
