"""What makes moto fast and small enough to be the offline runtime's AWS: installed by ``make run`` (local/aws.py)
and the bench, never by the functional tests.

Nothing here changes what a request answers (local/moto_corrections.py holds every patch that does, and the
functional tests install that module alone); what is here only spends less time or memory, or tells the
runtime what changed.  Pinned, like the corrections, to moto 5.2.5 (``install()`` refuses another version).
``install()`` is idempotent and changes moto's classes in this process; ``uninstall()`` puts them back (the
functional tests' fixture calls it, since an e2e test in the same pytest worker may have installed them):

* **moto's model registry**: moto appends every model object it ever creates
  (each SQS message, shard iterator, stream record ...) to its class's
  ``instances_tracked`` list, for ``/moto-api/data.json``, and never removes
  one.  The registry here holds them weakly: data.json lists what is alive in a
  backend (unchanged for what the backends keep, such as sent emails).
* **Writes are announced**: ``watch_writes(listener)`` calls ``listener(table, key,
  attribute)`` after every DynamoDB item write in this process (PutItem, UpdateItem,
  DeleteItem, and the writes of BatchWriteItem and TransactWriteItems), in the order
  they happen, under the corrections' write lock: ``attribute(name)`` is the written item's
  attribute in DynamoDB JSON (None when absent or deleted).  The TTL emulation
  learns expiry times from it instead of scanning tables.
* **Schedule changes are announced**: ``watch_schedules(listener)`` calls
  ``listener(group, name)`` after every CreateSchedule, UpdateSchedule,
  DeleteSchedule (and for each schedule of a deleted group) in this process: the
  Scheduler emulation reads the schedules that changed instead of listing them all
  every second (moto's ListSchedules sorts every schedule for each page).
* **Stream retention**: moto keeps every stream record forever; ``trim_shard``
  drops the oldest ones (the runtime calls it once the stream pollers have read
  them, and drops any over 24 h, AWS's retention).  A read from before the
  oldest record kept starts at the oldest record kept (AWS would answer
  TrimmedDataAccessException: the one place this module departs from AWS, and only
  for records moto would otherwise have kept forever).
* **SQS**: moto remembers the receipt handle of every deleted message (so that
  deleting again succeeds); ``bound_deleted_receipts`` keeps the newest ones.
* **SES**: moto keeps every email sent; ``trim_sent_emails`` keeps the newest.
* **Speed**: moto's server lists its own package directory (170 ``isdir`` calls) on
  every request to find a service's name; the list is read once.  moto's SQS goes
  through every message of the queue, several times, for each SendMessage (the
  queue's attributes: three counts, each message's time computed through
  ``datetime``), each message received (the retention check reads every
  attribute, three times) and each message deleted (twice): with thousands of
  delayed messages waiting (the tasks due within the SQS-delay horizon), every call
  took tens of milliseconds.  Here one clock reading serves a whole pass, the
  retention check reads the retention period only, a DeleteMessageBatch finds its
  messages in one pass (and rebuilds the queue's list under the lock a send takes,
  so no message sent meanwhile is lost), and a SendMessage reads the one queue
  attribute it needs (ContentBasedDeduplication) without counting the queue's
  messages.  Same answers, same semantics.  moto's update expressions are parsed
  once per text and checked in linear time (same nodes, same errors); one made of
  plain SETs (``if_not_exists`` too) and REMOVEs of top-level attributes is applied
  without copying and traversing its tree, and wherever moto could answer an error
  it goes through moto's own validation.  A condition expression is lexed and parsed
  once per text and names (each request's own values put in the kept tree; a text
  that fails goes through moto's parse every time), and a Query no longer sorts the
  whole table before keeping the queried key's items (a Query of the table reads
  only that hash key's items; one of an index by a string key compares the raw
  strings first): same answers, same errors.  A delete looks for its receipt handles
  among the messages in flight before going through the whole queue.  GetRecords' records are
  serialised straight from their shapes (anything unusual goes through moto's
  serializer): the same bytes.
  Every request found its handler's method names by ``inspect.getmembers`` over the
  response class (a tenth of moto's CPU for a CreateSchedule): they are listed once per class.
  moto reads botocore's service models through the loader the process's clients share (local/shared_loaders.py).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import importlib
import inspect
import itertools
import json
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from local import shared_loaders
from local.moto_corrections import WRITE_LOCK, check_moto_version, installed_moto_version

# listener(table name, key in DynamoDB JSON, attribute(name) -> DynamoDB JSON or None): after each item write
WriteListener = Callable[[str, dict[str, Any], Callable[[str], Any]], None]
_write_listeners: list[WriteListener] = []
_installed = False
_install_lock = threading.Lock()
_MISSING = object()
_patched: list[tuple[Any, str, Any, Any]] = []  # (class or module, name, its own value before, the value set)


def _patch(owner: Any, name: str, value: Any) -> None:
    """``setattr(owner, name, value)``, remembered for ``uninstall()``."""
    _patched.append((owner, name, vars(owner).get(name, _MISSING), value))
    setattr(owner, name, value)


# --- the registry of live model objects -------------------------------------------

class LiveInstances:
    """What moto's ``instances_tracked`` lists were, holding objects weakly (strongly if they cannot be)."""

    def __init__(self, initial: Iterable[Any] = ()) -> None:
        self._refs: dict[int, Any] = {}
        self._count = 0
        self._lock = threading.Lock()
        for instance in initial:
            self.append(instance)

    def append(self, instance: Any) -> None:
        with self._lock:
            self._count += 1
            key = self._count
        refs = self._refs
        try:
            ref: Any = weakref.ref(instance, lambda _, key=key: refs.pop(key, None))  # type: ignore[misc]
        except TypeError:  # no weak references to it: kept, as moto would
            ref = lambda instance=instance: instance  # noqa: E731
        refs[key] = ref

    def _live(self) -> list[Any]:
        while True:
            try:
                refs = list(self._refs.values())
                break
            except RuntimeError:  # an object died while the snapshot was taken
                continue
        return [o for o in (ref() for ref in refs) if o is not None]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._live())

    def __len__(self) -> int:
        return len(self._live())

    def __bool__(self) -> bool:
        return bool(self._refs)

    def __contains__(self, instance: object) -> bool:
        return any(o is instance for o in self._live())

    def remove(self, instance: object) -> None:
        for key, ref in list(self._refs.items()):
            if ref() is instance:
                self._refs.pop(key, None)
                return
        raise ValueError("not tracked")


_registries: weakref.WeakKeyDictionary[type, LiveInstances] = weakref.WeakKeyDictionary()


class _TrackedInstances:
    """A data descriptor on moto's model metaclass: every model class's ``instances_tracked`` (read,
    appended to, and reset by assignment) becomes a ``LiveInstances``, classes made later included."""

    def __get__(self, cls: type | None, meta: type | None = None) -> LiveInstances:
        if cls is None:
            raise AttributeError("instances_tracked")
        registry = _registries.get(cls)
        if registry is None:
            registry = _registries.setdefault(cls, LiveInstances())
        return registry

    def __set__(self, cls: type, value: Iterable[Any]) -> None:
        _registries[cls] = value if isinstance(value, LiveInstances) else LiveInstances(value)


def _track_weakly() -> None:
    from moto.core.base_backend import InstanceTrackerMeta
    from moto.core.model_instances import model_data

    for models in model_data.values():
        for cls in models.values():
            kept = vars(cls).get("instances_tracked")
            if isinstance(cls, type) and isinstance(kept, list):
                _registries[cls] = LiveInstances(kept)
                kept.clear()  # shadowed by the descriptor from now on
    _patch(InstanceTrackerMeta, "instances_tracked", _TrackedInstances())


# --- change feeds: item writes and schedule changes ----------------------------------

ScheduleListener = Callable[[str, str], None]  # (group, name) after a schedule was created, updated or deleted
_schedule_listeners: list[ScheduleListener] = []
_schedule_lock = threading.Lock()


def watch_schedules(listener: ScheduleListener) -> Callable[[], None]:
    """Call ``listener(group, name)`` after every schedule change in this process; returns what stops it."""
    with _schedule_lock:
        _schedule_listeners.append(listener)

    def stop() -> None:
        with _schedule_lock:
            if listener in _schedule_listeners:
                _schedule_listeners.remove(listener)
    return stop


def _announce_schedules(changed: Iterable[tuple[str, str]]) -> None:
    with _schedule_lock:
        listeners = list(_schedule_listeners)
    for group, name in changed:
        for listener in listeners:
            with contextlib.suppress(Exception):  # a listener's bug never fails the call
                listener(group, name)


def _schedule_announced(method: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(method)

    def change(self: Any, *args: Any, **kwargs: Any) -> Any:
        arguments = signature.bind(self, *args, **kwargs).arguments
        if method.__name__ == "delete_schedule_group":
            name = arguments.get("name") or "default"
            group = self.schedule_groups.get(name)
            changed = [(name, s) for s in list(group.schedules if group is not None else {})]
            result = method(self, *args, **kwargs)
        else:
            result = method(self, *args, **kwargs)
            changed = [(arguments.get("group_name") or "default", str(arguments.get("name") or ""))]
        _announce_schedules(changed)
        return result
    change.__name__ = method.__name__
    change.__wrapped__ = method  # type: ignore[attr-defined]
    return change


def watch_writes(listener: WriteListener) -> Callable[[], None]:
    """Call ``listener`` after every DynamoDB item write in this process; returns what stops it."""
    with WRITE_LOCK:
        _write_listeners.append(listener)

    def stop() -> None:
        with WRITE_LOCK:
            if listener in _write_listeners:
                _write_listeners.remove(listener)
    return stop


def _absent(name: str) -> Any:
    return None


def _announced(method: Callable[..., Any]) -> Callable[..., Any]:
    """A backend write method that tells the write listeners what it wrote (put, update) or removed (delete)."""
    def write(self: Any, table_name: str, *args: Any, **kwargs: Any) -> Any:
        with WRITE_LOCK:  # announced in the order the writes happen
            result = method(self, table_name, *args, **kwargs)
            if _write_listeners:
                _announce(self, table_name, None if method.__name__ == "delete_item" else result,
                          kwargs.get("key", args[0] if args else None))
        return result
    write.__name__ = method.__name__
    write.__doc__ = method.__doc__
    write.__wrapped__ = method  # type: ignore[attr-defined]
    return write


def _announce(backend: Any, table_name: str, item: Any, key: Any) -> None:
    try:
        table = backend.get_table(table_name)
        if item is not None:
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            key = {name: item.attrs[name].to_json() for name in names}
        if not isinstance(key, dict):
            return

        def attribute(name: str) -> Any:
            value = item.attrs.get(name) if item is not None else None
            return value.to_json() if value is not None else None
    except Exception:  # nothing to announce (moto's internals changed): listeners fall back on scans
        return
    for listener in list(_write_listeners):
        with contextlib.suppress(Exception):  # a listener's bug never fails the write
            listener(str(table_name), dict(key), attribute if item is not None else _absent)


# --- stream retention ------------------------------------------------------------------

def _from_oldest_kept(get: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
    """StreamShard.get from the oldest record kept when ``start`` was trimmed away (moto's asserts)."""
    def from_oldest_kept(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
        return get(self, max(start, self.starting_sequence_number), quantity)
    from_oldest_kept.__wrapped__ = get  # type: ignore[attr-defined]
    return from_oldest_kept


def trim_shard(shard: Any, keep_after: int | None, keep_newest: int, older_than: float | None) -> int:
    """Drop ``shard``'s oldest records: those with a sequence number up to ``keep_after`` (read by every
    reader; None: no reader) beyond the ``keep_newest`` newest, and any created before the epoch second
    ``older_than``.  Sequence numbers stay as they were.  The number of records dropped."""
    with WRITE_LOCK:
        records = shard.items
        start = shard.starting_sequence_number
        drop = 0
        if keep_after is not None:
            drop = max(0, min(keep_after - start + 1, len(records) - keep_newest))
        if older_than is not None:
            while drop < len(records) and _created(records[drop]) < older_than:
                drop += 1
        if drop:
            del records[:drop]
            shard.starting_sequence_number = start + drop
        return drop


def _created(record: Any) -> float:
    moment = getattr(record, "record", {}).get("dynamodb", {}).get("ApproximateCreationDateTime")
    try:
        return float(moment)
    except (TypeError, ValueError):
        return float("inf")


def stream_shards(account: str, region: str) -> dict[str, Any]:
    """The stream shard of every table with a stream in moto's in-process backend, by table name."""
    from moto.dynamodb.models import dynamodb_backends

    if account not in dynamodb_backends or region not in dynamodb_backends[account]:
        return {}
    tables = dynamodb_backends[account][region].tables
    return {name: table.stream_shard for name, table in list(tables.items()) if table.stream_shard is not None}


# --- SQS and SES ---------------------------------------------------------------------

class RecentReceipts:
    """A set of the newest ``limit`` receipt handles, oldest forgotten first (moto's ``deleted_messages``)."""

    def __init__(self, initial: Iterable[str] = (), limit: int = 10_000) -> None:
        self.limit = limit
        self._handles: dict[str, None] = {}
        self.update(initial)

    def update(self, handles: Iterable[str]) -> None:
        for handle in handles:
            self.add(handle)

    def add(self, handle: str) -> None:
        self._handles.pop(handle, None)
        self._handles[handle] = None
        while len(self._handles) > self.limit:
            self._handles.pop(next(iter(self._handles)), None)

    def discard(self, handle: str) -> None:
        self._handles.pop(handle, None)

    def __contains__(self, handle: object) -> bool:
        return handle in self._handles

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._handles))


def bound_deleted_receipts(limit: int) -> int:
    """Give every SQS queue in moto's in-process backends a bounded memory of deleted receipt handles;
    the number of handles remembered overall."""
    from moto.sqs.models import sqs_backends

    total = 0
    for account in list(sqs_backends):
        for region in list(sqs_backends[account]):
            for queue in list(sqs_backends[account][region].queues.values()):
                deleted: Any = queue.deleted_messages
                if not isinstance(deleted, RecentReceipts):
                    deleted = RecentReceipts(deleted, limit)
                    queue.deleted_messages = deleted
                total += len(deleted)
    return total


def trim_sent_emails(keep: int) -> int:
    """Keep the newest ``keep`` emails moto's SES has accepted (every account and region); the number dropped."""
    from moto.ses.models import ses_backends

    dropped = 0
    for account in list(ses_backends):
        for region in list(ses_backends[account]):
            backend = ses_backends[account][region]
            extra = len(backend.sent_messages) - keep
            if extra > 0:
                del backend.sent_messages[:extra]
                dropped += extra
    return dropped


# --- installing -----------------------------------------------------------------------

def install() -> None:
    """Make moto fast and small in this process (once); MotoVersionError under another moto than 5.2.5."""
    global _installed
    with _install_lock:
        if _installed:
            return
        check_moto_version(installed_moto_version())
        from moto.dynamodb.models import DynamoDBBackend
        from moto.dynamodb.models.table import StreamShard

        for name in ("put_item", "update_item", "delete_item"):  # BatchWriteItem and transactions call these
            _patch(DynamoDBBackend, name, _announced(getattr(DynamoDBBackend, name)))
        _patch(StreamShard, "get", _from_oldest_kept(StreamShard.get))
        _track_weakly()
        _list_services_once()
        _fast_sqs()
        _fast_expression_traversal()
        _plain_updates()
        _fast_attribute_picking()
        _conditions_parsed_once()
        _queries_without_sorting()
        _fast_stream_records()
        _announce_schedule_changes()
        _method_names_once()
        _service_models_shared()
        _installed = True


def uninstall() -> None:
    """Take the speed-ups off: moto's classes as they were before ``install()`` (the corrections stay).

    The functional tests' ``aws`` fixture calls it: under pytest-xdist an e2e test run earlier by the same
    worker started the offline runtime's moto, which installed them in that process.  Refused (RuntimeError)
    if something patched a speed-up's attribute again since: restoring would drop that patch."""
    global _installed
    with _install_lock:
        if not _installed:
            return
        for owner, name, _, value in _patched:
            if vars(owner).get(name, _MISSING) is not value:
                raise RuntimeError(f"{owner!r}.{name} was patched again after moto_speed.install(): not undone")
        for owner, name, original, _ in reversed(_patched):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        for cls, live in list(_registries.items()):  # the model registry: lists again, of the live objects
            type.__setattr__(cls, "instances_tracked", list(live))
        _registries.clear()
        _patched.clear()
        _installed = False


def _list_services_once() -> None:
    from moto import backends

    services = tuple(backends.list_of_moto_modules())
    _patch(backends, "list_of_moto_modules", lambda: services)


def _service_models_shared() -> None:
    """moto reads a service's model through the process's shared botocore loader (local/shared_loaders.py),
    which its clients have parsed already, instead of a loader of its own that parses it again."""
    from moto.core import utils

    _patch(utils, "create_loader", shared_loaders.shared_loader)


def _method_names_once() -> None:
    """A response class's method names, listed once per class (moto's dispatch lists them on every request)."""
    from moto.core import responses, utils

    listed = utils.method_names_from_class
    known: dict[Any, list[str]] = {}

    def method_names(clazz: object) -> list[str]:
        names = known.get(clazz)
        if names is None:
            names = known[clazz] = listed(clazz)
        return names

    _patch(responses, "method_names_from_class", method_names)


def _fast_sqs() -> None:
    """moto's SQS passes over a queue's messages, each with one clock reading (see the module's docstring)."""
    import time

    from moto.sqs.exceptions import ReceiptHandleIsInvalid
    from moto.sqs.models import Message, Queue, SQSBackend

    def now_millis() -> float:
        return time.time() * 1000.0

    def visible(self: Any) -> bool:
        return bool(now_millis() > self.visible_at)

    def delayed(self: Any) -> bool:
        return bool(now_millis() < self.delayed_until)

    def messages(self: Any) -> list[Any]:
        now = now_millis()
        return [m for m in self._messages if now > m.visible_at and now >= m.delayed_until]

    def number_delayed(self: Any) -> int:
        now = now_millis()
        return sum(1 for m in self._messages if now < m.delayed_until)

    def number_not_visible(self: Any) -> int:
        now = now_millis()
        return sum(1 for m in self._messages if not now > m.visible_at)

    def number_visible(self: Any) -> int:
        return len(self.messages)

    def delete_messages(self: Any, receipt_handles: list[str]) -> list[bool]:
        """Delete the messages of ``receipt_handles`` in one pass over the queue; for each handle, in order,
        whether it was valid (deleted now or already: deleting again succeeds, as on AWS)."""
        wanted = {handle for handle in receipt_handles if handle not in self.deleted_messages}
        found: dict[str, list[Any]] = {}
        if wanted:  # first among the messages in flight, where a handle just received is
            queued = set(map(id, self._messages))
            for message in list(self._pending_messages):
                if id(message) in queued:
                    for handle in (message.receipt_handle, *message._old_receipt_handles):
                        if handle in wanted:
                            found.setdefault(handle, []).append(message)
        if any(handle not in found for handle in wanted):  # else through the whole queue, as before
            found = {}
            for message in self._messages:
                for handle in (message.receipt_handle, *message._old_receipt_handles):
                    if handle in wanted:
                        found.setdefault(handle, []).append(message)
        gone: set[int] = set()
        gone_messages: list[Any] = []
        valid = []
        for handle in receipt_handles:
            if handle in self.deleted_messages:
                valid.append(True)
                continue
            messages = [m for m in found.get(handle, []) if id(m) not in gone]
            for message in messages:
                self.pending_messages.discard(message)
                self.deleted_messages.update(message.all_receipt_handles)
                gone.add(id(message))
                gone_messages.append(message)
            valid.append(bool(messages))
        if gone:
            with self._messages_lock:  # a send appends under this lock: none is lost to the rebuilt list
                kept = list(self._messages)
                for message in gone_messages:  # a handful, each found by identity (no __eq__) at C speed
                    with contextlib.suppress(ValueError):
                        while True:
                            del kept[kept.index(message)]
                self._messages = kept
        return valid

    def delete_message(self: Any, receipt_handle: str) -> None:
        if not delete_messages(self, [receipt_handle])[0]:
            raise ReceiptHandleIsInvalid()

    def delete_message_batch(self: Any, queue_name: str,
                             receipts: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
        valid = delete_messages(self.get_queue(queue_name), [r["ReceiptHandle"] for r in receipts])
        success = [r["Id"] for r, ok in zip(receipts, valid, strict=True) if ok]
        errors = [{"Id": r["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid",
                   "Message": f'The input receipt handle "{r["ReceiptHandle"]}" is not a valid receipt handle.'}
                  for r, ok in zip(receipts, valid, strict=True) if not ok]
        return success, errors

    def retained(self: Any, queue_name: str, message: Any) -> bool:
        period = int(self.get_queue(queue_name).message_retention_period)
        return bool(period + message.sent_timestamp / 1000 > time.time())

    # SendMessage reads one attribute of the queue, ContentBasedDeduplication (FIFO queues only), through
    # ``queue.attributes``, which counts the queue's messages three times: on the send path, in this
    # thread, the attributes are that one (absent on a standard queue, as in moto's own dict).
    every_attribute = Queue.attributes
    sending = threading.local()

    def attributes(self: Any) -> dict[str, Any]:
        if not getattr(sending, "active", False):
            return cast(dict[str, Any], every_attribute.fget(self))  # type: ignore[attr-defined]
        if not self.fifo_queue:
            return {}
        return {"ContentBasedDeduplication": str(self.content_based_deduplication).lower()}

    def send_path(method: Callable[..., Any]) -> Callable[..., Any]:
        def send(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(sending, "active", False)
            sending.active = True
            try:
                return method(self, *args, **kwargs)
            finally:
                sending.active = outer
        return send

    _patch(Queue, "attributes", property(attributes))
    _patch(SQSBackend, "send_message", send_path(SQSBackend.send_message))
    _patch(Message, "visible", property(visible))
    _patch(Message, "delayed", property(delayed))
    _patch(Queue, "messages", property(messages))
    _patch(Queue, "approximate_number_of_messages_delayed", property(number_delayed))
    _patch(Queue, "approximate_number_of_messages_not_visible", property(number_not_visible))
    _patch(Queue, "approximate_number_of_messages", property(number_visible))
    _patch(Queue, "delete_message", delete_message)
    _patch(SQSBackend, "delete_message_batch", delete_message_batch)
    _patch(SQSBackend, "is_message_valid_based_on_retention_period", retained)


def _fast_expression_traversal() -> None:
    """moto's expression validators (``DepthFirstTraverser`` subclasses) rebuilt their map of node class to
    processing method (a dict of bound methods) twice for every node of the expression's tree; each
    traverser's map never changes, so it is built once per traverser here.  Same nodes, same order."""
    from moto.dynamodb.parsing.validators import ActionCountValidator, OverlappingPathsValidator

    traverser: Any = importlib.import_module("moto.dynamodb.parsing.ast_nodes").DepthFirstTraverser  # untyped

    def processing(self: Any) -> tuple[tuple[type, Callable[[Any], Any]], ...]:
        cached: tuple[tuple[type, Callable[[Any], Any]], ...] | None = self.__dict__.get("_fast_processing")
        if cached is None:
            cached = self.__dict__["_fast_processing"] = tuple(self._processing_map().items())
        return cached

    def nodes_to_be_processed(self: Any) -> tuple[type, ...]:
        cached: tuple[type, ...] | None = self.__dict__.get("_fast_node_types")
        if cached is None:
            cached = self.__dict__["_fast_node_types"] = tuple(node_type for node_type, _ in processing(self))
        return cached

    def process(self: Any, node: Any) -> Any:
        for node_type, processor in processing(self):
            if isinstance(node, node_type):
                return processor(node)
        return None

    _patch(traverser, "nodes_to_be_processed", nodes_to_be_processed)
    _patch(traverser, "process", process)
    for checker in (ActionCountValidator, OverlappingPathsValidator):
        _patch(checker, "traverse", _checked_at_the_root(checker.traverse))
    _parse_once_copy_fast()


def _parse_once_copy_fast() -> None:
    """moto parsed an update expression twice per UpdateItem (the response handler's check, then the
    backend), and each validator deep-copied the tree through ``copy.deepcopy``'s generic protocol.  A
    tree depends on the expression's text only and is never changed (validators work on their copy):
    the last 1,024 texts' trees are kept, and a tree is copied node by node (a node's attributes copied
    as ``deepcopy`` would, parents and shared nodes once, through the same memo)."""
    validators = importlib.import_module("moto.dynamodb.parsing.validators")
    parser: Any = importlib.import_module("moto.dynamodb.parsing.expressions").UpdateExpressionParser
    node: type = importlib.import_module("moto.dynamodb.parsing.ast_nodes").Node
    _patch(parser, "make", staticmethod(functools.lru_cache(maxsize=1024)(parser.make)))
    immutable = (str, int, float, bool, type(None))

    def clone(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if memo is None:
            memo = {}
        kind: Any = type(value)
        if kind in immutable:
            return value
        found = memo.get(id(value))
        if found is not None:
            return found
        if kind is list:
            copied: list[Any] = []
            memo[id(value)] = copied
            copied.extend(clone(element, memo) for element in value)
            return copied
        if isinstance(value, node):
            twin = kind.__new__(kind)
            memo[id(value)] = twin
            twin.__dict__.update({name: clone(attribute, memo) for name, attribute in value.__dict__.items()})
            return twin
        return copy.deepcopy(value, memo)

    _patch(validators, "deepcopy", clone)  # the module's own name for copy.deepcopy


def _checked_at_the_root(traverse: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """moto's clause-count and overlapping-path checks ran on every node of an update expression's tree,
    each collecting the clauses of the node's subtree: quadratic in the expression (a 12-action SET
    and REMOVE ran each check about 50 times).  A subtree's clauses and paths are a subset of the
    whole expression's, so a subtree breaks a rule only if the whole expression does: the check runs
    on the whole expression first, and only an expression that fails it goes through moto's own
    traversal, which raises exactly the error it always raised.  The checks change no node."""
    update_expression: type = importlib.import_module("moto.dynamodb.parsing.ast_nodes").UpdateExpression

    def traverse_once(self: Any, node: Any) -> Any:
        if isinstance(node, update_expression):
            check = next(iter(self._processing_map().values()))
            try:
                check(node)
            except Exception:
                return traverse(self, node)
            return node
        return traverse(self, node)

    return traverse_once


def _announce_schedule_changes() -> None:
    from moto.scheduler.models import EventBridgeSchedulerBackend

    for name in ("create_schedule", "update_schedule", "delete_schedule", "delete_schedule_group"):
        _patch(EventBridgeSchedulerBackend, name, _schedule_announced(getattr(EventBridgeSchedulerBackend, name)))


# --- UpdateItem: plain SET and REMOVE of top-level attributes without moto's expression machinery -----

# One action of a plain update expression: ("set", target, value, if_not_exists source or None) or
# ("remove", target, None, None); a target or source is ("attr", name) or ("name", "#placeholder").
_Token = tuple[str, str]
_Action = tuple[str, _Token, str | None, _Token | None]
_ITEM_SIZE_LIMIT = 405000  # moto's LimitedSizeDict: over this, an update fails (ItemSizeToUpdateTooLarge)


class _PlainUpdate:
    """A validated plain update, in place of moto's validated tree: ``normalize()`` as moto calls it, and the
    changes ``UpdateExpressionExecutor.execute`` applies (attribute name -> DynamoType, or None to remove)."""

    def __init__(self, changes: list[tuple[str, Any]]) -> None:
        self.changes = changes

    def normalize(self) -> None:
        pass


def _plain_actions(ast: Any) -> tuple[_Action, ...] | None:
    """The actions of an update expression made only of ``SET top = :value``, ``SET top = if_not_exists(top2,
    :value)`` and ``REMOVE top`` (each clause once), in the expression's order; None for anything else (nested
    paths, list indexes, arithmetic, list_append, ADD, DELETE), which goes through moto's own validation."""
    nodes = importlib.import_module("moto.dynamodb.parsing.ast_nodes")
    plain_names = (nodes.ExpressionAttribute, nodes.ExpressionAttributeName)

    def top(path: Any) -> _Token | None:
        if type(path) is not nodes.UpdateExpressionPath or len(path.children) != 1:
            return None
        part = path.children[0]
        if type(part) not in plain_names or not isinstance(part.children[0], str):
            return None
        return ("attr" if type(part) is nodes.ExpressionAttribute else "name", part.children[0])

    def value_name(node: Any) -> str | None:
        if type(node) is nodes.ExpressionAttributeValue and isinstance(node.children[0], str):
            return str(node.children[0])
        return None

    actions: list[_Action] = []
    clauses: set[type] = set()

    def walk(node: Any) -> bool:
        kind = type(node)
        if kind in (nodes.UpdateExpressionSetClause, nodes.UpdateExpressionRemoveClause):
            if kind in clauses:
                return False
            clauses.add(kind)
        if kind in (nodes.UpdateExpression, nodes.UpdateExpressionSetClause, nodes.UpdateExpressionSetActions,
                    nodes.UpdateExpressionRemoveClause, nodes.UpdateExpressionRemoveActions):
            return all(walk(child) for child in node.children)
        if kind is nodes.UpdateExpressionSetAction and len(node.children) == 2:
            target, value = top(node.children[0]), node.children[1]
            if target is None or type(value) is not nodes.UpdateExpressionValue or len(value.children) != 1:
                return False
            operand = value.children[0]
            if value_name(operand) is not None:
                actions.append(("set", target, value_name(operand), None))
                return True
            if (type(operand) is nodes.UpdateExpressionFunction and len(operand.children) == 3
                    and operand.children[0] == "if_not_exists"):
                source, default = top(operand.children[1]), value_name(operand.children[2])
                if source is None or default is None:
                    return False
                actions.append(("set", target, default, source))
                return True
            return False
        if kind is nodes.UpdateExpressionRemoveAction and len(node.children) == 1:
            target = top(node.children[0])
            if target is None:
                return False
            actions.append(("remove", target, None, None))
            return True
        return False

    return tuple(actions) if walk(ast) else None


def _plain_changes(actions: tuple[_Action, ...], names: dict[str, str] | None, values: dict[str, Any] | None,
                   item: Any, table: Any) -> list[tuple[str, Any]] | None:
    """What a plain update does to ``item``, as moto's validation and execution would do it; None wherever
    moto could answer an error (a name or value not defined, a reserved word, two actions on one attribute, a
    key attribute, an index key's type or emptiness, the item's size limit): moto's own path then raises it."""
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.utilities import bytesize

    reserved = _reserved_words()
    names = names or {}
    values = values or {}

    def resolve(token: _Token) -> str | None:
        kind, text = token
        if kind == "name":
            return names.get(text)
        return None if text.upper() in reserved else text

    typed = {d["AttributeName"]: d["AttributeType"] for d in table.attr}
    keys = set(table.table_key_attrs)
    index_keys = set(table.attribute_keys)
    changes: list[tuple[str, Any]] = []
    seen: set[str] = set()
    attrs = item.attrs
    grows = 0
    for action, target_token, value_token, source_token in actions:
        target = resolve(target_token)
        if target is None or target in seen or target in keys or target_token[1] in keys:
            return None
        seen.add(target)
        if action == "remove":
            changes.append((target, None))
            continue
        assert value_token is not None
        if value_token not in values:
            return None
        value = DynamoType(values[value_token])
        if source_token is not None:
            source = resolve(source_token)
            if source is None:
                return None
            value = attrs.get(source, value)
        for name in {target, target_token[1]}:
            if name in typed and typed[name] != value.type:
                return None
            if name in index_keys and value.type in ("S", "B") and not value.value:
                return None
        grows += bytesize(target) + value.size()
        changes.append((target, value))
    if grows and sum(v.size() if type(v) is DynamoType else bytesize(str(v))
                     for v in (*attrs.keys(), *attrs.values())) + grows > _ITEM_SIZE_LIMIT:
        return None
    return changes


@functools.cache
def _reserved_words() -> frozenset[str]:
    from moto.dynamodb.parsing.reserved_keywords import ReservedKeywords

    return frozenset(ReservedKeywords.get_reserved_keywords())


def _plain_updates() -> None:
    """moto validated every update expression by copying its tree and running ten traversals over it (the
    offline runtime's claim, nine SETs, two of them ``if_not_exists``, and five REMOVEs, spent most of its
    UpdateItem there).  An expression of plain SETs and REMOVEs of top-level attributes is analysed once per
    tree (trees are cached per text, above) and applied directly: the same attributes set to the same values
    (the existing attribute's own value for ``if_not_exists``, as moto), in the same order, and wherever moto
    could answer an error the request goes through moto's own validation, which raises it."""
    validators = importlib.import_module("moto.dynamodb.parsing.validators")
    executors = importlib.import_module("moto.dynamodb.parsing.executors")
    validator: Any = validators.UpdateExpressionValidator
    executor: Any = executors.UpdateExpressionExecutor
    plans: dict[int, tuple[Any, tuple[_Action, ...] | None]] = {}
    original_init, original_validate, original_execute = validator.__init__, validator.validate, executor.execute

    def init(self: Any, expression: Any, expression_attribute_names: Any, expression_attribute_values: Any,
             item: Any, table: Any) -> None:
        known = plans.get(id(expression))
        if known is None or known[0] is not expression:
            if len(plans) >= 2048:
                plans.clear()
            known = plans[id(expression)] = (expression, _plain_actions(expression))
        changes = None if known[1] is None else _plain_changes(
            known[1], expression_attribute_names, expression_attribute_values, item, table)
        self.__dict__["_plain"] = None if changes is None else _PlainUpdate(changes)
        if changes is None:
            original_init(self, expression, expression_attribute_names, expression_attribute_values, item, table)

    def validate(self: Any) -> Any:
        plain = self.__dict__.get("_plain")
        return plain if plain is not None else original_validate(self)

    def execute(self: Any, node: Any = None) -> None:
        if node is None and isinstance(self.update_ast, _PlainUpdate):
            attrs = self.item.attrs
            for name, value in self.update_ast.changes:
                if value is None:
                    attrs.pop(name, None)
                else:
                    dict.__setitem__(attrs, name, value)  # the size was checked with the changes
            return
        original_execute(self, node)

    _patch(validator, "__init__", init)
    _patch(validator, "validate", validate)
    _patch(executor, "execute", execute)


def _fast_attribute_picking() -> None:
    """moto's response serializer finds each member's value in the result through six alias providers, built
    for every member of every response (on GetRecords' 100 records with their images, most of the call's
    time).  For a result held in a plain dict, which keys they try depends only on the member's shape (and the
    shape's parent, which the serializer sets) and its name: the keys are worked out once per shape and name,
    and tried in the same order, so every response has the same values."""
    serialize: Any = importlib.import_module("moto.core.serialize")
    picker: Any = serialize.AttributePicker
    get_value: Callable[[Any, Any, Any], Any] = importlib.import_module("moto.core.utils").get_value
    missing = serialize.MISSING
    original_call = picker.__call__
    known: dict[tuple[type, int, str, int], tuple[Any, Any, tuple[str, ...]]] = {}

    def call(self: Any, context: Any) -> Any:
        obj = context.obj
        if type(obj) is not dict:
            return original_call(self, context)
        shape = context.shape
        parent = getattr(shape, "parent", None)
        entry = (type(self), id(shape), context.key, id(parent))
        found = known.get(entry)
        if found is None or found[0] is not shape or found[1] is not parent:
            if len(known) >= 4096:
                known.clear()
            found = known[entry] = (shape, parent, tuple(self.get_possible_keys(context)))
        for possible_key in found[2]:
            value = get_value(obj, possible_key, missing)
            if value is not missing:
                break
        else:
            value = None
        if self.response_transformers:
            key_path = f"{context.key_path}.{context.key}"
            for transform_path, transform in self.response_transformers.items():
                if key_path.endswith(transform_path):
                    return transform(value)
        return value

    _patch(picker, "__call__", call)


# --- ConditionExpression and Query: without re-parsing a text, without sorting the whole table ------------------

def _conditions_parsed_once() -> None:
    """moto lexed and parsed a condition expression on every request that carries one, twice for an
    UpdateItem (the response handler's check of the names and values used, then the backend): the
    executor's claim and settle spent a fifth of moto's time there.  A parse depends on the text and the
    attribute names only, the values being looked up by placeholder: the tree of a text parsed without
    error is kept (the last 1,024 texts and names) and each request builds its condition from it with its
    own values, through moto's own builder.  A request that lacks a value its text uses goes through moto's
    parse, which raises what it always raised; so does every text that failed to parse."""
    parser: Any = importlib.import_module("moto.dynamodb.comparisons").ConditionExpressionParser
    value_kind = parser.Kind.EXPRESSION_ATTRIBUTE_VALUE
    original_parse = parser.parse
    node_type: Any = parser.Node
    trees: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[Any, tuple[str, ...], tuple[str, ...]]] = {}
    lock = threading.Lock()

    def with_values(node: Any, values: dict[str, Any]) -> Any:
        """The tree with this request's values; the subtrees without a value are the cached ones."""
        if node.kind == value_kind:
            return node_type(node.nonterminal, node.kind, node.text, values[node.text], node.children)
        children = node.children
        if not children:
            return node
        replaced = [with_values(child, values) for child in children]
        if all(new is old for new, old in zip(replaced, children, strict=True)):
            return node
        return node_type(node.nonterminal, node.kind, node.text, node.value, replaced)

    def parse(self: Any) -> Any:
        text, names, values = self.condition_expression, self.expression_attribute_names, self.expression_attribute_values
        if not text or not isinstance(text, str) or (names is not None and not isinstance(names, dict)):
            return original_parse(self)
        try:
            key = (text, tuple(sorted(names.items())) if names else ())
            hash(key)
        except TypeError:  # a name that is not a string: moto's own parse
            return original_parse(self)
        known = trees.get(key)
        if known is None:
            op = original_parse(self)  # raises on a bad text: nothing kept
            tree = getattr(self, "_fast_tree", None)
            if tree is not None:
                with lock:
                    if len(trees) >= 1024:
                        trees.clear()
                    trees[key] = (tree, tuple(self.expr_attr_names_found), tuple(self.expr_attr_values_found))
            return op
        tree, names_found, values_found = known
        if values_found and (not isinstance(values, dict) or any(name not in values for name in values_found)):
            return original_parse(self)
        self.expr_attr_names_found.extend(names_found)
        self.expr_attr_values_found.extend(values_found)
        return self._make_op_condition(with_values(tree, values) if values_found else tree)

    original_make = parser._make_op_condition

    def make_op_condition(self: Any, node: Any) -> Any:  # the root, as moto's parse built it: kept for the cache
        if "_fast_tree" not in self.__dict__:
            self.__dict__["_fast_tree"] = node
        return original_make(self, node)

    _patch(parser, "parse", parse)
    _patch(parser, "_make_op_condition", make_op_condition)


_query_scope = threading.local()


def _queries_without_sorting() -> None:
    """moto's Query sorted every item of the table (``Table.all_items``, DynamoType comparisons in Python) and
    only then kept the ones of the queried key, which it sorts again: at 10,000 tasks each of the interval
    processor's Queries on the bucket index sorted the whole table.  Within a Query, ``all_items`` gives the
    items unsorted (the Query sorts what it keeps by a key unique to each item, so the order it started from
    never shows), and for a Query of the table itself only the items of the queried hash key (moto keeps a
    table's items by hash key: the same items its comparison kept).  Scan, and everything else, still gets
    the sorted list."""
    table_class: Any = importlib.import_module("moto.dynamodb.models.table").Table
    dynamo_type: Any = importlib.import_module("moto.dynamodb.models.dynamo_type").DynamoType
    original_query, original_all_items = table_class.query, table_class.all_items

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = kwargs["index_name"] if "index_name" in kwargs else (args[6] if len(args) > 6 else None)
        previous = getattr(_query_scope, "scope", None)
        strings = () if not index_name else tuple(  # an index's string keys: compared before moto compares
            (name, value.value) for name, value in kwargs.get("hash_key_conditions") or ()
            if isinstance(value, dynamo_type) and value.type == "S" and type(value.value) is str)
        _query_scope.scope = (self, None if index_name else hash_key, strings)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _query_scope.scope = previous

    def all_items(self: Any) -> Any:
        scope = getattr(_query_scope, "scope", None)
        if scope is None or scope[0] is not self:
            return original_all_items(self)
        _query_scope.scope = None  # one call per Query
        hash_key = scope[1]
        if isinstance(hash_key, dynamo_type):
            try:
                found = self.items.get(hash_key)  # a defaultdict: get never adds a key
            except TypeError:  # not a key's type: the whole table, as moto compares
                found = _MISSING
            if found is None:
                return []
            if found is not _MISSING:
                return list(found.values()) if self.range_key_attr else [found]
        every: Iterable[Any] = (itertools.chain.from_iterable(hash_set.values() for hash_set in self.items.values())
                                if self.range_key_attr else self.items.values())
        if not scope[2]:
            return list(every)
        # moto keeps an item only if its value equals the key's, a string here: this string (one pass)
        (name, text), *others = scope[2]
        items = [item for item in every
                 if (value := item.attrs.get(name)) is not None and value.type == "S" and value.value == text]
        for name, text in others:
            items = [item for item in items
                     if (value := item.attrs.get(name)) is not None and value.type == "S" and value.value == text]
        return items

    _patch(table_class, "query", query)
    _patch(table_class, "all_items", all_items)


# --- GetRecords: the records serialised straight from their shape --------------------------------------------

class _NotPlain(Exception):
    """A value the direct serialisation below does not handle: the response goes through moto's serializer."""


def _fast_stream_records() -> None:
    """moto's response serializer walks every member of every value through its generic machinery (the path
    kept, a picker per member, a method looked up by name per value): on GetRecords' 100 records with their
    images, 14% of moto's process at 10,000 due tasks, the largest single item left.  Here the records are
    serialised straight from their shapes, as moto does (the shape's members in order, absent and None left
    out, blobs in base64, timestamps in epoch seconds to the millisecond), and the rest of the response
    (NextShardIterator, headers) by moto with an empty list of records, into which the records go.  Any
    value not of the plain kind a record holds (a key its shape does not have, a None in a list or map, a
    string that is not one, a renamed member) sends the whole response through moto's serializer."""
    handler: Any = importlib.import_module("moto.dynamodbstreams.responses").DynamoDBStreamsHandler
    core: Any = importlib.import_module("moto.core.responses")
    serialize: Any = importlib.import_module("moto.core.serialize")
    timestamps = serialize.TimestampSerializer("unixtimestamp")
    record_shapes: list[Any] = []
    empty = '"Records": []'

    def encode(value: Any, shape: Any) -> Any:
        kind = shape.type_name
        if kind == "structure":
            members = shape.members
            if type(value) is not dict or any(name not in members for name in value):
                raise _NotPlain
            out: dict[str, Any] = {}
            for name, member in members.items():
                item = value.get(name)
                if item is not None:
                    if "name" in member.serialization:
                        raise _NotPlain
                    out[name] = encode(item, member)
            return out
        if kind == "list":
            if type(value) is not list:
                raise _NotPlain
            return [encode(element, shape.member) for element in value]
        if kind == "map":
            if type(value) is not dict:
                raise _NotPlain
            return {key: encode(element, shape.value) for key, element in value.items()}
        if kind == "string" and type(value) is str:
            return value
        if kind == "blob" and type(value) in (bytes, str):
            raw = value.encode("utf-8") if type(value) is str else value
            return base64.b64encode(raw).strip().decode("utf-8")
        if kind == "boolean" and type(value) is bool:
            return value
        if kind in ("integer", "long") and type(value) is int:
            return value
        if kind == "timestamp":
            wrapper: dict[str, Any] = {}
            timestamps.serialize(wrapper, value, shape, "t")
            return wrapper["t"]
        raise _NotPlain

    def get_records(self: Any) -> Any:
        arn = self._get_param("ShardIterator")
        limit = self._get_param("Limit")
        result = self.backend.get_records(arn, 1000 if limit is None else limit)
        try:
            if not record_shapes:
                model = core.get_service_model(self.boto3_service_name)
                record_shapes.append(model.operation_model("GetRecords").output_shape.members["Records"].member)
            records = result.get("Records") if type(result) is dict else None
            if type(records) is not list:
                raise _NotPlain
            encoded = json.dumps([encode(record, record_shapes[0]) for record in records])
            status, headers, body = self.serialized(core.ActionResult({**result, "Records": []}))
            if type(body) is not str or body.count(empty) != 1:
                raise _NotPlain
        except _NotPlain:
            return core.ActionResult(result)
        return body.replace(empty, '"Records": ' + encoded), {**headers, "status": status}

    get_records.__wrapped__ = handler.get_records  # type: ignore[attr-defined]
    _patch(handler, "get_records", get_records)
