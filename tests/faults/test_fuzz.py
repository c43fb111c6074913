"""Bad input: hypothesis and random-bytes fuzzing of what kmq parses.

Every parser must answer garbage with its documented error and nothing else: no other
exception, no crash, no hang (each test has a pytest-timeout).

* format names and path names: ``FormatNameError`` (``QueuePathNameError`` for path names),
  and a name that parses prints back to text that parses to the same thing;
* message envelopes, receipts and acknowledgment payloads: ``EnvelopeError``; random bytes,
  and also valid records with bytes flipped, cut or added behind a valid header, so the Avro
  decoder itself is reached; acknowledgments that are valid Avro with wrong values (bad ids,
  classes, GUID texts, times); record headers never raise (``read_headers``);
* registry records (``__kmq.queues``, ``__kmq.queue_managers``): ``EnvelopeError`` for random
  keys and values, mutated valid records (with the envelopes above), random JSON, and valid
  records with fields dropped, retyped or added and random versions; whatever is accepted
  round-trips;
* queue-view index entries (``IndexEntry.from_record``) from random headers, offsets and sizes:
  never raise; a record they cannot index is poison (dead-lettered), never a message;
* rows of the durable outgoing store (``decode_row``): ``EnvelopeError`` for random column
  values and for valid rows with columns changed; and a real SQLite store holding any values,
  text that is not UTF-8 included, is read by ``pending()`` and ``unreadable()`` without an
  error, each row in exactly one of them;
* id-block records (``kmq.<qm>.system.idblocks``) are not fuzzed: nothing decodes them (a
  lease uses only the offset the broker acknowledges, see ``facade.state.sequence``);
* configuration: ``KmqConfig.load`` on random TOML text, random TOML documents and random
  ``KMQ_*`` environments gives ``ConfigurationError`` or a configuration;
* the CLI through typer's ``CliRunner``: random commands, options and values exit 0, 1 or 2
  with no exception escaping (no broker: broker commands fail fast with exit 1).

Signatures and encrypted bodies are fuzzed in tests/unit/test_signing_encryption.py (the
decoders raise only SignatureError / EncryptionError, arrival checks only MessageRejected).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
import sqlite3
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from facade.cli import app
from facade.config import KmqConfig
from facade.model import avro
from facade.model.envelope import (
    decode_acknowledgment,
    decode_message,
    encode_acknowledgment,
    encode_message,
    read_headers,
)
from facade.errors import ConfigurationError, EnvelopeError, FormatNameError, QueuePathNameError
from facade.model.formatnames import parse_format_name, parse_path_name, parse_queue_reference
from facade.model.message import (
    AcknowledgedQueue,
    AcknowledgmentInfo,
    Message,
    MessageClass,
    MessageId,
)
from facade.state.outgoingqueue import OutgoingQueue, StoredRecord, decode_row
from facade.state.queuestate import IndexEntry
from facade.model.receipts import ReceiptAction, decode_receipt, encode_receipt, new_claim
from facade.state.registry import (
    QueueManagerRecord,
    QueueProperties,
    decode_queue_manager_record,
    decode_queue_record,
)

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

_GUID = str(uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0))
_FRAGMENTS = [
    "DIRECT=", "OS:", "TCP:", "HTTP://", "HTTPS://", "PUBLIC=", "PRIVATE=", "DL=", "MACHINE=",
    "MULTICAST=", "\\", "/", "private$", "PRIVATE$", "system$", ";JOURNAL", ";DEADLETTER",
    ";DEADXACT", ";poison", ";", ",", "@", ".", "{", "}", _GUID, _GUID.upper(), "0000000a",
    "localhost", "127.0.0.1", "host", "q", "orders", ":", "=", " ", "\t", "\x00", "é", "€",
    "\U0001f600", "$", "..", "msmq/private$/q", "224.0.0.1:1801",
]
names = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=4)), max_size=12)
    .map("".join),
)


# -- format names and path names ---------------------------------------------------------------


@FUZZ
@given(names)
def test_format_names_raise_only_format_name_errors_and_round_trip(text: str) -> None:
    try:
        parsed = parse_format_name(text)
    except FormatNameError:
        return
    assert parse_format_name(str(parsed)) == parsed


@FUZZ
@given(names)
def test_path_names_raise_only_path_name_errors_and_round_trip(text: str) -> None:
    try:
        parsed = parse_path_name(text)
    except QueuePathNameError:
        return
    assert parse_path_name(str(parsed)) == parsed


@FUZZ
@given(names)
def test_queue_references_raise_only_format_name_errors(text: str) -> None:
    try:
        parse_queue_reference(text)
    except FormatNameError:
        pass


# -- envelopes, receipts, acknowledgments -----------------------------------------------------


_QUEUE = QueueProperties(path_name="qm1\\private$\\orders", queue_manager="qm1",
                         queue_name="orders", private=True, data_topic="kmq.qm1.private.orders",
                         receipts_topic="kmq.qm1.private.orders.receipts", label="fuzz",
                         quota_kb=5, type_id=_GUID)
_MANAGER = QueueManagerRecord("qm1", _GUID, 1.0)


def decode_queue_value(value: object) -> QueueProperties:
    """A registry record of ``_QUEUE``'s key with this value."""
    return decode_queue_record(_QUEUE.path_name.encode(), value)


def decode_queue_manager_value(value: object) -> QueueManagerRecord:
    """A registry record of ``_MANAGER``'s key with this value."""
    return decode_queue_manager_record(_MANAGER.name.encode(), value)


def _valid_records() -> list[bytes]:
    guid = uuid.UUID(_GUID)
    message = Message(id=MessageId(guid, 7), body=b"body", label="label", priority=5,
                      correlation_id=MessageId(guid, 3), time_to_be_received=60.0,
                      sent_time=dt.datetime.now(dt.timezone.utc),
                      destination_queue=r"DIRECT=OS:qm\private$\q", properties={"k": "v"})
    ack = AcknowledgmentInfo(MessageId(guid, 7), MessageClass.NACK_RECEIVE_TIMEOUT,
                             (AcknowledgedQueue(r"DIRECT=OS:qm\private$\q", guid),),
                             reason="why", original_body=b"body")
    receipt = new_claim(ReceiptAction.RECEIVE, (1, 2, 3), "fuzz")
    lock = new_claim(ReceiptAction.LOCK, (4,), "fuzz", lease_ms=30_000)  # receipt version 2
    return [encode_message(message).value, encode_acknowledgment(ack), encode_receipt(receipt),
            encode_receipt(lock), _QUEUE.to_json(), _MANAGER.to_json()]


_RECORDS = _valid_records()
_DECODERS = [
    (decode_message, EnvelopeError),
    (decode_acknowledgment, EnvelopeError),
    (decode_receipt, EnvelopeError),
    (decode_queue_value, EnvelopeError),
    (decode_queue_manager_value, EnvelopeError),
]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(4)
        if choice == 0 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif choice == 1 and len(buf) > 10:
            del buf[rng.randrange(10, len(buf)):]
        elif choice == 2:
            buf[rng.randrange(len(buf) + 1):0] = rng.randbytes(rng.randint(1, 8))
        else:
            buf = bytearray(data[:10]) + rng.randbytes(rng.randint(0, 80))  # valid header
    return bytes(buf)


@pytest.mark.parametrize("decode, error", _DECODERS, ids=lambda x: getattr(x, "__name__", ""))
def test_random_and_mutated_bytes_give_only_envelope_errors(decode, error) -> None:
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    inputs = [None, b"", b"\xc3\x01", "text", 42] + [rng.randbytes(rng.randint(0, 64))
                                                     for _ in range(300)]
    inputs += [_mutate(record, rng) for record in _RECORDS for _ in range(400)]
    for value in inputs:
        try:
            decode(value)
        except error:
            pass
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{decode.__name__}({value!r}) raised {type(exc).__name__}: {exc} "
                        f"(seed {seed})")


@FUZZ
@given(st.binary(max_size=200))
def test_hypothesis_bytes_behind_a_valid_envelope_header(body: bytes) -> None:
    for record in _RECORDS:
        for decode, error in _DECODERS:
            try:
                decode(record[:10] + body)
            except error:
                pass


_texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
_ACKNOWLEDGMENT = avro.family("acknowledgment.avsc")
acknowledgment_records = st.fixed_dictionaries({
    "original_id": st.binary(min_size=20, max_size=20),
    "message_class": st.one_of(st.sampled_from([int(c) for c in MessageClass]),
                               st.integers(-2**31, 2**31 - 1)),
    "queues": st.lists(st.fixed_dictionaries({
        "format_name": st.one_of(st.none(), _texts, st.just(r"DIRECT=OS:qm\private$\q")),
        "guid": st.one_of(st.none(), _texts, st.uuids().map(str)),
    }), max_size=3),
    "time": st.one_of(st.integers(-2**63, 2**63 - 1), st.integers(0, 2**42)),
    "reason": st.one_of(st.none(), _texts),
    "original_body": st.one_of(st.none(), st.binary(max_size=20)),
})


@FUZZ
@given(acknowledgment_records)
def test_acknowledgments_with_wrong_values_raise_only_envelope_errors(record: dict) -> None:
    # Valid Avro, so the checks after the Avro decoder are reached: ids, classes (NORMAL is no
    # acknowledgment), GUID texts, empty queue lists, times beyond datetime's range.
    body = _ACKNOWLEDGMENT.encode(record)
    try:
        info = decode_acknowledgment(body)
    except EnvelopeError:
        return
    assert decode_acknowledgment(encode_acknowledgment(info)) == info


header_values = st.one_of(st.binary(max_size=20), st.none(), st.text(max_size=5), st.integers())
header_names = st.one_of(st.sampled_from(["kmq.id", "kmq.class", "kmq.priority", "kmq.expires",
                                          "kmq.not_before", "kmq.correlation_id", "kmq.txn",
                                          "kmq.version"]), st.text(max_size=10))


@FUZZ
@given(st.one_of(st.none(), st.lists(st.tuples(header_names, header_values), max_size=10)))
def test_read_headers_never_raises(headers) -> None:
    read_headers(headers)


# -- registry records ---------------------------------------------------------------------------

#: (decoder, key, valid value) of each registry.
_REGISTRIES = [
    (decode_queue_record, _QUEUE.path_name.encode(), _QUEUE.to_json()),
    (decode_queue_manager_record, _MANAGER.name.encode(), _MANAGER.to_json()),
]
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _texts),
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(_texts, children, max_size=4)),
    max_leaves=10)


def _decodes_or_refuses(decode, key: object, value: object) -> None:
    """``decode`` gives a record that round-trips, or EnvelopeError; nothing else."""
    try:
        record = decode(key, value)
    except EnvelopeError:
        return
    assert decode(key, record.to_json()) == record


@FUZZ
@given(key=st.one_of(st.none(), st.binary(max_size=40),
                    st.sampled_from([k for _, k, _ in _REGISTRIES])),
       value=st.one_of(st.none(), st.binary(max_size=300)))
def test_registry_records_of_random_bytes_raise_only_envelope_errors(key, value) -> None:
    for decode, _key, _value in _REGISTRIES:
        _decodes_or_refuses(decode, key, value)


@FUZZ
@given(doc=json_values)
def test_registry_records_of_random_json_raise_only_envelope_errors(doc) -> None:
    value = json.dumps(doc).encode()
    for decode, key, _value in _REGISTRIES:
        _decodes_or_refuses(decode, key, value)


@FUZZ
@given(data=st.data())
def test_registry_records_with_wrong_fields_raise_only_envelope_errors(data) -> None:
    for decode, key, value in _REGISTRIES:
        doc = json.loads(value)
        for _ in range(data.draw(st.integers(1, 4), label="changes")):
            action = data.draw(st.sampled_from(["drop", "retype", "add", "version"]))
            field = data.draw(st.sampled_from(sorted(doc) or ["version"]))
            if action == "drop":
                doc.pop(field, None)
            elif action == "retype":
                doc[field] = data.draw(json_values)
            elif action == "add":
                doc[data.draw(_texts)] = data.draw(json_values)
            else:
                doc["version"] = data.draw(st.one_of(st.integers(), json_values))
        # json.dumps writes NaN and Infinity, which are no JSON: decoders must refuse them too.
        _decodes_or_refuses(decode, key, json.dumps(doc).encode())


# -- queue-view index entries -------------------------------------------------------------------

_ID = f"{_GUID}\\7"
index_header_values = st.one_of(
    st.none(), st.binary(max_size=20), st.text(max_size=8), st.integers(),
    st.sampled_from([b"1", b"0", b"-1", b"7", b"8", b" 3 ", b"3_0", b"9" * 5000, b"1e3",
                     _ID.encode(), _ID.upper().encode(), f"{_GUID}\\{2**32}".encode(),
                     f"{_GUID}\\07".encode(), "\u0663".encode(), b"\xff\xfe"]),
    st.builds(lambda guid, seq: f"{guid}\\{seq}".encode(), st.uuids(),
              st.integers(-10, 2**40)),
)


@FUZZ
@given(offset=st.integers(0, 2**63 - 1), size=st.integers(0, 2**31),
       headers=st.one_of(st.none(), st.lists(st.tuples(header_names, index_header_values),
                                             max_size=12)),
       origin=st.one_of(st.none(), _texts))
def test_index_entries_of_random_headers_never_raise(offset, size, headers, origin) -> None:
    entry = IndexEntry.from_record(offset, size, headers, origin=origin)
    assert entry.offset == offset and entry.size == size
    if entry.poison:
        assert entry.dedupe_key == ""  # never a duplicate, never handed out: dead-lettered
    else:
        assert 0 <= entry.priority <= 7 and size >= 10
        assert entry.dedupe_key == (entry.message_id if origin is None
                                    else f"{entry.message_id}@{origin}")


# -- rows of the outgoing store -------------------------------------------------------------------

#: A row as OutgoingQueue.put writes it: id, topic, key, value, headers, message id, deadline,
#: purpose, created.
_ROW = (7, "kmq.qm1.private.orders", b"key", _RECORDS[0],
        json.dumps([["kmq.version", base64.b64encode(b"1").decode()], ["h", ""]]),
        f"{_GUID}\\7", 1_700_000_060_000, "message:4242", 1_700_000_000_000)
#: What SQLite hands back: its five storage classes, and text that was not UTF-8 (read with
#: surrogate escapes, as the store reads it).
sqlite_values = st.one_of(
    st.none(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=20),
    st.binary(max_size=40), st.binary(min_size=1, max_size=10).map(
        lambda b: b.decode("utf-8", "surrogateescape")),
    st.sampled_from(["[]", "[[]]", '[["a"]]', '[["a", "!!"]]', '[["a", "AA=="]]', '{"a": 1}',
                     '[[1, "AA=="]]', "[" * 5000, "kmq.qm1.private.orders", ".", "message:0",
                     "message:\u00b2"]),
)


def _decodes_row_or_refuses(row: object) -> None:
    """decode_row gives the record the row holds, or EnvelopeError; nothing else."""
    try:
        stored = decode_row(row)  # type: ignore[arg-type]
    except EnvelopeError as exc:
        assert exc.raw is None or isinstance(exc.raw, bytes)
        return
    assert isinstance(stored, StoredRecord) and stored.row_id == row[0]  # type: ignore[index]
    record = stored.record
    assert (record.topic, record.key, record.value, record.message_id, record.deadline_ms,
            record.purpose, record.created_ms) == tuple(row[i] for i in (1, 2, 3, 5, 6, 7, 8))


def test_a_valid_row_decodes() -> None:
    assert decode_row(_ROW).record.headers == (("kmq.version", b"1"), ("h", b""))


@FUZZ
@given(row=st.one_of(st.lists(sqlite_values, max_size=11), st.none(), st.integers(),
                     st.text(max_size=9)))
def test_outgoing_rows_of_random_values_raise_only_envelope_errors(row) -> None:
    _decodes_row_or_refuses(row)


@FUZZ
@given(changes=st.dictionaries(st.integers(0, len(_ROW) - 1), sqlite_values, min_size=1,
                               max_size=3))
def test_outgoing_rows_with_columns_changed_raise_only_envelope_errors(changes) -> None:
    _decodes_row_or_refuses(tuple(changes.get(i, v) for i, v in enumerate(_ROW)))


stored_values = st.one_of(sqlite_values.filter(lambda v: not isinstance(v, str)),
                          st.text(max_size=20),
                          st.binary(max_size=10).map(lambda b: ("as text", b)))


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.dictionaries(st.integers(0, len(_ROW) - 2), stored_values, max_size=3),
                     min_size=1, max_size=6))
def test_an_outgoing_store_reads_whatever_its_rows_hold(tmp_path_factory, rows) -> None:
    # Rows written behind the store's back, as a damaged disk or another program would: every
    # row is in pending() or in unreadable(), and neither raises (a damaged row once made the
    # read, and so QueueManager.open(), fail).
    path = tmp_path_factory.mktemp("outgoing") / "outgoing.sqlite"
    columns = "topic, key, value, headers, message_id, deadline_ms, purpose, created_ms"
    with OutgoingQueue(path) as store:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")  # one commit (one fsync) per example
        written = 0
        for changes in rows:
            values = [changes.get(i, v) for i, v in enumerate(_ROW[1:])]
            marks = ["CAST(? AS TEXT)" if isinstance(v, tuple) else "?" for v in values]
            params = [v[1] if isinstance(v, tuple) else v for v in values]
            try:
                conn.execute(f"INSERT INTO outgoing ({columns}) VALUES ({', '.join(marks)})",
                             params)
            except sqlite3.IntegrityError:
                continue  # NOT NULL: SQLite itself keeps such a row out
            written += 1
        conn.execute("COMMIT")
        conn.close()
        pending, unreadable = store.pending(), store.unreadable()
        assert len(pending) + len(unreadable) == written == store.count()
        assert {s.row_id for s in pending}.isdisjoint(row for row, _ in unreadable)


# -- configuration ------------------------------------------------------------------------------


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and abs(value) != float("inf") else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))


def _toml(doc: dict) -> str:
    lines, tables = [], []
    for key, value in doc.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
    for name, table in tables:
        lines.append(f"[{json.dumps(name)}]")
        lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in table.items()
                  if not isinstance(v, dict)]
    return "\n".join(lines) + "\n"


scalars = st.one_of(st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=20), st.lists(st.integers(0, 9), max_size=3))
top_keys = st.sampled_from(["bootstrap_servers", "home", "queue_manager", "principal",
                            "directory", "kafka", "typo"])
directory_keys = st.sampled_from(["url", "base_dn", "bind_dn", "password", "starttls",
                                  "ca_file", "cert_file", "key_file", "sasl_mechanism",
                                  "timeout", "nope"])
toml_docs = st.dictionaries(
    top_keys,
    st.one_of(scalars, st.dictionaries(st.one_of(directory_keys, st.text(max_size=8)), scalars,
                                       max_size=5)),
    max_size=6)


def _load_config(tmp_path: Path, text: str | bytes, env: dict | None = None) -> None:
    path = tmp_path / "kmq.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        KmqConfig.load({"KMQ_CONFIG": str(path), "KMQ_HOME": str(tmp_path), **(env or {})})
    except ConfigurationError:
        pass


@FUZZ
@given(doc=toml_docs)
def test_config_from_random_toml_documents(tmp_path_factory, doc: dict) -> None:
    _load_config(tmp_path_factory.mktemp("cfg"), _toml(doc))


@FUZZ
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200)))
def test_config_from_random_toml_text(tmp_path_factory, text) -> None:
    _load_config(tmp_path_factory.mktemp("cfg"), text)


env_names = st.sampled_from(["KMQ_BOOTSTRAP_SERVERS", "KMQ_DIRECTORY_URL",
                             "KMQ_DIRECTORY_BASE_DN", "KMQ_DIRECTORY_BIND_DN",
                             "KMQ_DIRECTORY_PASSWORD", "KMQ_DIRECTORY_STARTTLS",
                             "KMQ_DIRECTORY_CA_FILE", "KMQ_DIRECTORY_SASL_MECHANISM",
                             "KMQ_DIRECTORY_TIMEOUT", "KMQ_QUEUE_MANAGER", "KMQ_PRINCIPAL"])


@FUZZ
@given(env=st.dictionaries(env_names, st.text(max_size=30).filter(lambda s: "\x00" not in s),
                           max_size=5))
def test_config_from_random_environment(tmp_path_factory, env: dict) -> None:
    _load_config(tmp_path_factory.mktemp("cfg"), "", env)


# -- the CLI ------------------------------------------------------------------------------------

_COMMANDS = [
    ["queue", "create"], ["queue", "locate"], ["queue", "list"], ["queue", "show"],
    ["queue", "set"], ["queue", "purge"], ["queue", "delete"], ["send"], ["receive"], ["peek"],
    ["qm", "init"], ["qm", "info"], ["qm", "run"], ["dlq", "list"], ["dlq", "show"],
    ["dlq", "purge"], ["journal", "list"], ["directory", "status"], ["alias", "list"],
    ["alias", "show"], ["alias", "create"], ["dl", "list"], ["dl", "show"], ["dl", "create"],
    ["dl", "add"], ["dl", "members"], ["dl", "expand"], ["bench"], ["nonsense"], [],
]
_OPTIONS = ["--json", "--label", "--priority", "--body", "--timeout", "--limit", "--public",
            "--journal", "--quota-kb", "--messages", "--rounds", "--payload", "--scenario",
            "--once", "--interval", "-n", "--help", "--", "-x"]
cli_args = st.tuples(
    st.sampled_from(_COMMANDS),
    st.lists(st.one_of(st.sampled_from(_OPTIONS), names, st.integers(-5, 10**10).map(str)),
             max_size=6),
).map(lambda t: t[0] + t[1])


@settings(max_examples=50, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(args=cli_args)
def test_cli_exits_0_1_or_2_on_any_arguments(tmp_path: Path, args: list[str]) -> None:
    env = {"KMQ_HOME": str(tmp_path / "home"), "KMQ_BOOTSTRAP_SERVERS": None,
           "KMQ_CONFIG": None, "KMQ_QUEUE_MANAGER": "fuzz",
           "KMQ_DIRECTORY_URL": f"embedded:{tmp_path / 'directory.json'}"}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output)
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output, (args, result.output)
