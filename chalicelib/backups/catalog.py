"""GET /backups: this stage's backups, newest first, every page full but the last.

AWS's ListBackups answers oldest first (within TimeRangeLowerBound inclusive, TimeRangeUpperBound exclusive,
whole seconds, at most 100 a page). So each request lists time WINDOWs [lower, upper), the first ending where
the previous page stopped, one call each, until its page is full, the walk ends, or MAX_LISTINGS were made:

- the window's listing is complete (no LastEvaluatedBackupArn): its backups are all in hand; they are
  shown newest first (up to the page's room: the rest stay for the next page, the token remembering the
  last one shown), and the next window ends where this one began, 4 times wider when it held under 25
  backups, half as wide when over 75;
- the listing is cut (more than 100 backups in the window): none is shown (what it read are the window's
  oldest, and newer ones were not read yet) and the window is listed again a quarter as wide.

A full page whose last window has nothing more lists the next window before it answers: a ``next_token`` only
when a backup follows. So every page but the last is full, and the last has no ``next_token``; only a page
that made MAX_LISTINGS listings first holds fewer, with a token. The walk ends at ``after`` (or at the first
day backups existed on DynamoDB).

Retention's decision on a backup depends on its table's NEWER good backups (``rules.TableWalk``), which the
walk has read on the earlier pages: the token carries each table's walk (a few numbers a table), so
``kept`` / ``expires_after`` are exactly what retention would decide now, under the stage's policy. A table's
last backup on a page, while a calendar count is not filled, is kept if it is the table's oldest: that is
looked up once a table (one ListBackups of it before the window), OLDEST_LOOKUPS a page at most, else that
backup's retention is unknown. When the token would pass TOKEN_MAX (thousands of tables walked account-wide)
the walks are dropped and the later pages say ``"retention": "unknown"`` for their backups (ask with
``table=`` for a table's).
With ``before`` the newer backups are not read at all, so retention is unknown on those pages too.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chalicelib.aws import Deps
from chalicelib.backups import rules
from chalicelib.backups.api import query_limit
from chalicelib.backups.quotas import paced, pacer
from chalicelib.backups.retention import retention_policy
from chalicelib.backups.retry import retry_transient
from chalicelib.backups.store import Run, RunStore
from chalicelib.web import bad_request, reject_unknown

LIMIT_MAX, LIMIT_DEFAULT = 100, 50
PAGE = 100                                   # AWS's ListBackups page
FIRST_WINDOW = 86_400                        # seconds: a day, account-wide
FIRST_TABLE_WINDOW = 30 * 86_400             # a table has a backup or so a day
WIDEST = 400 * 86_400
EPOCH = datetime(2017, 11, 1, tzinfo=UTC)    # before DynamoDB's first on-demand backup (November 2017)
OLDEST_LOOKUPS = 5                           # ListBackups a page may add to find tables' oldest backups
MAX_LISTINGS = 16                            # windows a page may list (5/s: about 3 s; empty, 2017 is 13 away)
TOKEN_MAX = 4_000                            # characters: far inside API Gateway's 10 KB request line
STATUSES = ("CREATING", "AVAILABLE", "DELETED")
TABLE = re.compile(r"[A-Za-z0-9_.-]{3,255}\Z")


@dataclass
class Cursor:
    """Where the walk is: everything from ``upper`` on was shown, and at ``upper`` itself those up to
    ``shown`` ((created, arn), newest first); the next window's width; each table's retention walk."""

    upper: int                                           # epoch seconds, exclusive bound of the next listing
    width: int
    shown: tuple[str, str] | None = None
    walks: dict[str, rules.TableWalk] | None = field(default_factory=dict)
    query: str = ""                                      # the query the token belongs to

    def encode(self) -> str:
        walks = None if self.walks is None else {
            t: [w.seen, {r.value: n for r, n in w.counted.items()}, {r.value: list(b) for r, b in w.last_bucket.items()},
                w.oldest] for t, w in self.walks.items()}
        raw = json.dumps({"u": self.upper, "w": self.width, "s": self.shown, "k": walks, "q": self.query},
                         separators=(",", ":")).encode()
        token = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
        if len(token) > TOKEN_MAX and self.walks is not None:
            self.walks = None
            return self.encode()
        return token

    @classmethod
    def decode(cls, token: str, query: str) -> Cursor:
        try:
            data = json.loads(zlib.decompress(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))))
            walks = None if data["k"] is None else {
                t: rules.TableWalk(int(seen), {rules.Keep(r): int(n) for r, n in counted.items()},
                                   {rules.Keep(r): (int(b[0]), int(b[1]), int(b[2])) for r, b in last.items()},
                                   int(oldest[0]) if oldest and oldest[0] is not None else None)
                for t, (seen, counted, last, *oldest) in data["k"].items()}  # no 4th: a token made before it
            cursor = cls(int(data["u"]), int(data["w"]), tuple(data["s"]) if data["s"] else None, walks,
                         str(data["q"]))
        except (ValueError, KeyError, TypeError, IndexError, zlib.error, binascii.Error) as exc:
            raise bad_request("next_token", "next_token is not a token this API gave") from exc
        if cursor.query != query:
            raise bad_request("next_token", "next_token belongs to another query (table, status, after, before)")
        return cursor


@dataclass(frozen=True)
class Query:
    table: str | None
    status: str | None
    after: datetime | None
    before: datetime | None
    limit: int

    @property
    def key(self) -> str:
        return json.dumps([self.table, self.status, self.after and self.after.isoformat(),
                           self.before and self.before.isoformat()])


def _time(query: dict[str, str], name: str) -> datetime | None:
    if name not in query:
        return None
    try:
        value = datetime.fromisoformat(query[name])
    except ValueError:
        raise bad_request(name, f"{name} must be an ISO-8601 time, got {query[name][:40]!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def parse_query(query: dict[str, str] | None) -> tuple[Query, str | None]:
    query = query or {}
    reject_unknown(query, {"table", "status", "after", "before", "limit", "next_token"})
    table = query.get("table")
    if table is not None and not TABLE.match(table):
        raise bad_request("table", "table must be a table name (3-255 of A-Z a-z 0-9 _ . -)")
    status = query.get("status")
    if status is not None and status not in STATUSES:
        raise bad_request("status", f"status must be one of {', '.join(STATUSES)}")
    limit = query_limit(query, LIMIT_DEFAULT, LIMIT_MAX)
    after, before = _time(query, "after"), _time(query, "before")
    if after and before and after >= before:
        raise bad_request("after", "after must be earlier than before")
    return Query(table, status, after, before, limit), query.get("next_token")


def _backup(summary: Any) -> rules.Backup:
    created = summary["BackupCreationDateTime"]
    return rules.Backup(arn=summary["BackupArn"], name=summary.get("BackupName", ""),
                        table=summary.get("TableName", ""), created=created.astimezone(UTC),
                        status=summary.get("BackupStatus", ""), type=summary.get("BackupType", ""))


def _key(backup: rules.Backup) -> tuple[str, str]:
    return backup.created.isoformat(), backup.arn


def list_backups(deps: Deps, raw: dict[str, str] | None) -> tuple[int, dict[str, Any]]:
    q, token = parse_query(raw)
    now = deps.clock()
    if token:
        cursor = Cursor.decode(token, q.key)
    else:
        start = q.before or now
        cursor = Cursor(math.ceil(start.timestamp()) + (0 if q.before else 1),
                        FIRST_TABLE_WINDOW if q.table else FIRST_WINDOW, None, None if q.before else {}, q.key)
    floor = math.floor((q.after or EPOCH).timestamp())
    prefix = deps.settings.backup_name_prefix
    shown: list[rules.Backup] = []
    verdicts: dict[str, rules.Verdict] = {}
    unknown: set[str] = set()
    sizes: dict[str, int | None] = {}
    lookups = [OLDEST_LOOKUPS]
    nxt: Cursor | None = None
    for _ in range(MAX_LISTINGS):
        lower = max(floor, cursor.upper - cursor.width)
        summaries, cut = _window(deps, q, lower, cursor.upper)
        if cut:  # the window's newest were not read: a narrower one
            nxt = cursor = Cursor(cursor.upper, max(1, (cursor.upper - lower) // 4), cursor.shown, cursor.walks, q.key)
            continue
        listed = [b for b in map(_backup, summaries) if b.type == "USER" and rules.is_ours(b, prefix)
                  and (q.after is None or b.created >= q.after)
                  and (cursor.shown is None or _key(b) < cursor.shown)]
        listed.sort(key=_key, reverse=True)
        matching = [b for b in listed if q.status is None or b.status == q.status]
        room = q.limit - len(shown)
        if room == 0 and matching:  # the page is full and more follow: the next page lists this window again
            nxt = cursor
            break
        taken = matching[:room]
        full = len(matching) > room
        reached = listed if not full else [b for b in listed if _key(b) >= _key(taken[-1])]
        window = [b for b in map(_backup, summaries) if b.type == "USER" and rules.is_ours(b, prefix)]
        found, left = _verdicts(deps, cursor, reached, now, window, lower, lookups)
        verdicts.update(found)
        unknown |= left
        sizes.update({s["BackupArn"]: s.get("BackupSizeBytes") for s in summaries})
        shown += taken
        if full:
            last = taken[-1]
            nxt = Cursor(math.floor(last.created.timestamp()) + 1, cursor.width, _key(last), cursor.walks, q.key)
            break
        if lower <= floor:  # the walk's end: no page after this one
            nxt = None
            break
        width = cursor.width * 4 if len(summaries) < PAGE // 4 else cursor.width // 2 if len(summaries) > 3 * PAGE // 4 \
            else cursor.width
        nxt = cursor = Cursor(lower, max(1, min(width, WIDEST)), None, cursor.walks, q.key)
    items = _views(deps, shown, verdicts, unknown if cursor.walks is not None else None, sizes)
    page: dict[str, Any] = {"backups": items, "next_token": nxt.encode() if nxt is not None else None}
    if deps.settings.export_bucket and not token:  # the first page: the exports beside the backups
        from chalicelib.backups import exports
        page["exports"] = exports.catalog(deps, q.table, q.limit)
    return 200, page


def _window(deps: Deps, q: Query, lower: int, upper: int) -> tuple[list[Any], bool]:
    """The backups of one ListBackups page of [lower, upper), and whether the window holds more (cut)."""
    kwargs: dict[str, Any] = {"BackupType": "USER", "Limit": PAGE, "TimeRangeLowerBound": datetime.fromtimestamp(lower, UTC),
                              "TimeRangeUpperBound": datetime.fromtimestamp(upper, UTC)}
    if q.table:
        kwargs["TableName"] = q.table
    listing = pacer(deps, "ListBackups")
    page = retry_transient(paced(listing, lambda: deps.clients.dynamodb.list_backups(**kwargs)), deps.sleep)
    return list(page.get("BackupSummaries", [])), bool(page.get("LastEvaluatedBackupArn"))


def _verdicts(deps: Deps, cursor: Cursor, reached: list[rules.Backup], now: datetime, window: list[rules.Backup],
              lower: int, lookups: list[int]) -> tuple[dict[str, rules.Verdict], set[str]]:
    """Retention's decision on the good backups read, each table's walk carried on (in the cursor), and the
    backups it is unknown for: a table's last on the page, when being its oldest would keep it and the
    page has made its OLDEST_LOOKUPS already (``lookups``: the page's lookups left)."""
    if cursor.walks is None:
        return {}, set()
    policy = retention_policy(deps.settings)
    by_table: dict[str, list[rules.Backup]] = {}
    for backup in reached:
        if backup.status == "AVAILABLE":
            by_table.setdefault(backup.table, []).append(backup)
    out: dict[str, rules.Verdict] = {}
    unknown: set[str] = set()
    for table, backups in by_table.items():
        walk = cursor.walks.setdefault(table, rules.TableWalk())

        def is_oldest(copies: list[rules.Backup], table: str = table, walk: rules.TableWalk = walk) -> bool:
            if walk.oldest is None and lookups[0] > 0:
                lookups[0] -= 1
                walk.oldest = _oldest_run(deps, table, window, lower)
            if walk.oldest is None:  # not looked up (or not found): the walk goes on as if older ones follow
                unknown.update(b.arn for b in copies)
                return False
            return walk.oldest == _stamp(deps, copies[0])

        out.update((v.backup.arn, v) for v in rules.table_verdicts(walk, backups, now, policy, is_oldest)
                   if v.backup.arn not in unknown)
    return out, unknown


def _stamp(deps: Deps, backup: rules.Backup) -> int | None:
    """The time in a backup's name (its run's), epoch seconds: one a run of a table."""
    at = rules.parse_backup_name(backup.name, deps.settings.backup_name_prefix, backup.table)
    return None if at is None else int(at.timestamp())


def _oldest_run(deps: Deps, table: str, window: list[rules.Backup], lower: int) -> int | None:
    """The run (its name's time) of ``table``'s oldest good backup of ours: in the first ListBackups page of
    the table before ``lower`` (oldest first), or when there is none before, the oldest of ``window`` (the
    page's listing, from ``lower`` on). None: that first page holds none and is not the last."""
    if lower > EPOCH.timestamp():
        listing = pacer(deps, "ListBackups")
        page = retry_transient(paced(listing, lambda: deps.clients.dynamodb.list_backups(
            BackupType="USER", TableName=table, Limit=PAGE, TimeRangeUpperBound=datetime.fromtimestamp(lower, UTC))),
            deps.sleep)
        before = [b for b in map(_backup, page.get("BackupSummaries", []))
                  if b.status == "AVAILABLE" and rules.is_ours(b, deps.settings.backup_name_prefix)]
        if before:
            return _stamp(deps, min(before, key=_key))
        if page.get("LastEvaluatedBackupArn"):
            return None
    good = [b for b in window if b.table == table and b.status == "AVAILABLE"]
    return _stamp(deps, min(good, key=_key)) if good else None


def _views(deps: Deps, shown: list[rules.Backup], verdicts: dict[str, rules.Verdict], unknown: set[str] | None,
           sizes: dict[str, int | None]) -> list[dict[str, Any]]:
    prefix = deps.settings.backup_name_prefix
    started = {b.arn: rules.parse_backup_name(b.name, prefix, b.table) for b in shown}
    times = [t for t in started.values() if t is not None]
    store = RunStore(deps)
    runs = store.runs_started(min(times), max(times)) if times else []
    run_of: dict[datetime, Run] = {}
    for made in sorted(runs, key=lambda r: r.run_id, reverse=True):  # two runs started in one second: the first id
        run_of[made.started_at.replace(microsecond=0)] = made
    planned = [(run_of[t].run_id, b.table) for b in shown if (t := started[b.arn]) in run_of
               and b.table in run_of[t].verify_plan]
    checks = store.verifications_of(planned) if planned else {}
    items = []
    for backup in shown:
        at = started[backup.arn]
        run = run_of.get(at) if at else None
        check = checks.get((run.run_id, backup.table)) if run else None
        verdict = verdicts.get(backup.arn)
        item: dict[str, Any] = {
            "table": backup.table, "name": backup.name, "arn": backup.arn, "status": backup.status,
            "size_bytes": sizes.get(backup.arn), "created": backup.created.isoformat(),
            "run_id": run.run_id if run else None,
            "run_started": at.isoformat() if at else None,
            "verified": check is not None and check.status == "PASSED",
            "verification": check.status if check else None,
            "kept": (verdict.kept[0].value if verdict and verdict.kept else None),
            "expires_after": verdict.expires_after.isoformat() if verdict and verdict.expires_after else None,
        }
        if backup.status == "AVAILABLE" and (unknown is None or backup.arn in unknown):
            item["retention"] = "unknown"
        items.append(item)
    return items

