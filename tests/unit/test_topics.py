"""Tests for facade.model.topics: Kafka topic names of kmq queues (docs/design.md, "Naming")."""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from facade.errors import InvalidParameter, UnsupportedFormatNameOperation
from facade.model.formatnames import SystemQueue, parse_path_name
from facade.model.topics import (
    QUEUE_MANAGER_REGISTRY_TOPIC,
    QUEUE_REGISTRY_TOPIC,
    TOPIC_PREFIX,
    QueueTopics,
    TopicRole,
    escape_name,
    id_block_topic,
    queue_topics,
    system_topics,
    topic_role,
    topics_for_path,
)

ESCAPED = re.compile(r"[a-z0-9_-]+")
KAFKA_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")

# Any text UTF-8 can encode (hypothesis' default excludes lone surrogates).
names = st.text(min_size=1, max_size=60)
queue_manager_names = st.text(min_size=1, max_size=5)
# Names that escape to at most 60 characters, so every topic fits. Some are made of the characters
# that matter to the escape and the separators: '_', '.', hex digits and the first letters of
# private, public, system, journal, sub and receipts.
mixed_names = st.one_of(
    st.text(min_size=1, max_size=5),
    st.text(alphabet="abcdefhjoprsuy0129_.-$ ", min_size=1, max_size=20),
)


def unescape(escaped: str) -> str:
    """Undo escape_name for an unhashed escaped name (proves the escape is reversible)."""
    out = bytearray()
    index = 0
    while index < len(escaped):
        if escaped[index] == "_":
            out.append(int(escaped[index + 1 : index + 3], 16))
            index += 3
        else:
            out.append(ord(escaped[index]))
            index += 1
    return out.decode("utf-8")


def assert_legal(topic: str) -> None:
    assert KAFKA_TOPIC.fullmatch(topic), topic
    assert topic not in (".", "..")


# --- escape_name ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("orders", "orders"),
        ("Orders", "orders"),
        ("order-2024", "order-2024"),
        ("my_queue", "my_5fqueue"),
        ("a.b", "a_2eb"),
        ("pay$", "pay_24"),
        ("two words", "two_20words"),
        ("café", "caf_c3_a9"),
        ("Ünïcode", "_c3_bcn_c3_afcode"),
        ("日本", "_e6_97_a5_e6_9c_ac"),
        ("_", "_5f"),
        (".", "_2e"),
        ("..", "_2e_2e"),
    ],
)
def test_escape_examples(name: str, escaped: str) -> None:
    assert escape_name(name) == escaped


def test_escape_of_a_124_character_ascii_name_is_kept_whole() -> None:
    name = "q" * 124
    assert escape_name(name) == name


def test_escape_of_a_124_character_name_of_escaped_characters_is_hashed() -> None:
    name = "$" * 124  # 372 characters once escaped
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    # The 130-character cut may split an escape; "_h" still marks the name as hashed.
    assert escape_name(name) == "_24" * 43 + "_" + "_h" + digest
    assert len(escape_name(name)) == 148


def test_hash_uses_the_lowercased_name() -> None:
    name = "Ü" * 30  # 180 characters once escaped
    digest = hashlib.sha256(name.lower().encode()).hexdigest()[:16]
    assert escape_name(name).endswith("_h" + digest)
    assert escape_name(name) == escape_name(name.lower())


def test_hash_threshold_is_150_characters() -> None:
    assert escape_name("a" * 150) == "a" * 150
    hashed = escape_name("a" * 151)
    assert hashed == "a" * 130 + "_h" + hashlib.sha256(b"a" * 151).hexdigest()[:16]


def test_long_names_with_a_common_prefix_hash_apart() -> None:
    assert escape_name("x" * 200 + "1") != escape_name("x" * 200 + "2")


@pytest.mark.parametrize("bad", ["", None, 5, "\ud800"])
def test_escape_rejects_empty_non_str_and_unencodable_names(bad: object) -> None:
    with pytest.raises(InvalidParameter):
        escape_name(bad)  # type: ignore[arg-type]


@given(names)
def test_escape_is_legal_deterministic_and_case_insensitive(name: str) -> None:
    escaped = escape_name(name)
    assert ESCAPED.fullmatch(escaped)
    assert "." not in escaped
    assert len(escaped) <= 150
    assert escape_name(name) == escaped
    assert escape_name(name.upper().lower()) == escape_name(name.upper())


@given(names, names)
def test_escape_is_injective_when_not_hashed(a: str, b: str) -> None:
    ea, eb = escape_name(a), escape_name(b)
    if "_h" in ea or "_h" in eb:
        return
    assert (ea == eb) == (a.lower() == b.lower())


@given(names)
def test_unhashed_escape_is_reversible(name: str) -> None:
    escaped = escape_name(name)
    if "_h" not in escaped:
        assert unescape(escaped) == name.lower()


@given(st.text(min_size=60, max_size=200))
def test_hashed_names_never_equal_unhashed_ones(name: str) -> None:
    escaped = escape_name(name)
    hashed = len("".join(
        chr(b) if chr(b) in "abcdefghijklmnopqrstuvwxyz0123456789-" else "___"
        for b in name.lower().encode()
    )) > 150
    # Only a hashed name contains "_h"; in an unhashed one every "_" is followed by hex.
    assert ("_h" in escaped) == hashed


# --- queue_topics / system_topics ----------------------------------------------------------------


def test_private_and_public_queue_topics() -> None:
    private = queue_topics("qm1", "orders", private=True)
    assert private.data == "kmq.qm1.private.orders"
    assert private.receipts == "kmq.qm1.private.orders.receipts"
    public = queue_topics("QM1", "Orders", private=False)
    assert public.data == "kmq.qm1.public.orders"
    assert public.receipts == "kmq.qm1.public.orders.receipts"


def test_journal_and_subqueue_topics() -> None:
    topics = queue_topics("qm1", "orders", private=True)
    assert topics.journal() == QueueTopics("kmq.qm1.private.orders.journal")
    assert topics.journal().receipts == "kmq.qm1.private.orders.journal.receipts"
    assert topics.subqueue("Poison").data == "kmq.qm1.private.orders.sub.poison"
    assert topics.subqueue("poison").receipts == "kmq.qm1.private.orders.sub.poison.receipts"
    assert topics.subqueue("re_try").data == "kmq.qm1.private.orders.sub.re_5ftry"


def test_escaped_queue_manager_and_queue_names() -> None:
    topics = queue_topics("host.example.com", "my_queue.v2$", private=False)
    assert topics.data == "kmq.host_2eexample_2ecom.public.my_5fqueue_2ev2_24"


@pytest.mark.parametrize(
    ("queue", "topic"),
    [
        (SystemQueue.DEADLETTER, "kmq.qm1.system.deadletter"),
        (SystemQueue.DEADXACT, "kmq.qm1.system.deadxact"),
        (SystemQueue.JOURNAL, "kmq.qm1.system.journal"),
    ],
)
def test_system_topics(queue: SystemQueue, topic: str) -> None:
    topics = system_topics("QM1", queue)
    assert topics.data == topic
    assert topics.receipts == topic + ".receipts"


def test_journals_and_subqueues_belong_to_plain_queues_only() -> None:
    queue = queue_topics("qm1", "orders", private=True)
    for topics in (
        queue.journal(),
        queue.subqueue("poison"),
        system_topics("qm1", SystemQueue.DEADLETTER),
        QueueTopics(QUEUE_REGISTRY_TOPIC),
    ):
        with pytest.raises(UnsupportedFormatNameOperation):
            topics.journal()
        with pytest.raises(UnsupportedFormatNameOperation):
            topics.subqueue("poison")


def test_constants() -> None:
    assert TOPIC_PREFIX == "kmq."
    assert QUEUE_REGISTRY_TOPIC == "__kmq.queues"
    assert QUEUE_MANAGER_REGISTRY_TOPIC == "__kmq.queue_managers"
    assert_legal(QUEUE_REGISTRY_TOPIC)
    assert_legal(QUEUE_MANAGER_REGISTRY_TOPIC)


def test_124_character_queue_names_fit_in_every_topic() -> None:
    for name in ("q" * 124, "$" * 124, "é" * 124):
        topics = queue_topics("my-host", name, private=True)
        for t in (topics, topics.journal(), topics.subqueue("p" * 32)):
            assert_legal(t.data)
            assert_legal(t.receipts)


@pytest.mark.parametrize("data", ["", ".", "..", "kmq.qm1.private.a b", "x" * 241])
def test_illegal_topic_names_are_refused(data: str) -> None:
    with pytest.raises(InvalidParameter):
        QueueTopics(data)


def test_too_long_topic_names_are_refused_with_a_hint() -> None:
    with pytest.raises(InvalidParameter, match="249") as info:
        queue_topics("m" * 120, "q" * 124, private=True)
    assert "shorter" in str(info.value)


def test_receipts_topic_as_kept_in_the_registry() -> None:
    topics = QueueTopics("kmq.qm1.private.orders", "kmq.qm1.private.orders.receipts")
    assert topics == queue_topics("qm1", "orders", private=True)
    assert QueueTopics("kmq.qm1.private.orders", "").receipts == "kmq.qm1.private.orders.receipts"
    with pytest.raises(InvalidParameter):
        QueueTopics("kmq.qm1.private.orders", "bad topic")


def test_longest_data_topic_whose_receipts_fit() -> None:
    data = "x" * (249 - len(".receipts"))
    assert QueueTopics(data).receipts == data + ".receipts"


def test_queue_topics_is_a_frozen_value() -> None:
    topics = queue_topics("qm1", "orders", private=True)
    assert topics == queue_topics("qm1", "ORDERS", private=True)
    assert hash(topics) == hash(queue_topics("qm1", "orders", private=True))
    with pytest.raises(AttributeError):
        topics.data = "x"  # type: ignore[misc]


@given(queue_manager_names, names, st.booleans())
def test_queue_topics_are_always_legal(queue_manager: str, name: str, private: bool) -> None:
    # A 5-character queue manager name escapes to at most 60 characters and a queue name to at
    # most 150, which leaves room for the longest suffix, ".sub.poison.receipts".
    topics = queue_topics(queue_manager, name, private=private)
    for t in (topics, topics.journal(), topics.subqueue("poison")):
        assert_legal(t.data)
        assert_legal(t.receipts)
        assert t.data.startswith(TOPIC_PREFIX)


@given(names, names, st.booleans(), names)
def test_topics_are_legal_or_refused(qm: str, name: str, private: bool, sub: str) -> None:
    try:
        queue = queue_topics(qm, name, private=private)
        topics = [queue, queue.journal(), queue.subqueue(sub)]
    except InvalidParameter as exc:
        assert "249" in str(exc)
        return
    for t in topics:
        assert_legal(t.data)
        assert_legal(t.receipts)


@given(
    st.tuples(queue_manager_names, mixed_names, st.booleans(), mixed_names),
    st.tuples(queue_manager_names, mixed_names, st.booleans(), mixed_names),
)
def test_distinct_queues_never_share_a_topic_even_with_dot_and_underscore_merged(
    a: tuple[str, str, bool, str], b: tuple[str, str, bool, str]
) -> None:
    def merged_topics(qm: str, name: str, private: bool, sub: str) -> set[str]:
        queue = queue_topics(qm, name, private=private)
        return {
            t.replace(".", "_")  # Kafka's metric names do not tell '.' and '_' apart
            for q in (queue, queue.journal(), queue.subqueue(sub))
            for t in (q.data, q.receipts)
        }

    def key(qm: str, name: str, private: bool, sub: str) -> tuple[str, str, bool]:
        return qm.lower(), name.lower(), private

    if key(*a) == key(*b):
        # Same queue: only the subqueues may differ, and then they must not collide.
        same = merged_topics(*a) & merged_topics(*b)
        assert len(same) == (6 if a[3].lower() == b[3].lower() else 4)
        return
    assert not merged_topics(*a) & merged_topics(*b)
    registries = {t.replace(".", "_") for t in (QUEUE_REGISTRY_TOPIC, QUEUE_MANAGER_REGISTRY_TOPIC,
                                                id_block_topic(a[0]), id_block_topic(b[0]))}
    assert not merged_topics(*a) & registries


def test_id_block_topic_is_no_queue_s_topic() -> None:
    assert id_block_topic("QM1") == "kmq.qm1.system.idblocks"
    system = {t for q in SystemQueue for t in (system_topics("qm1", q).data,
                                                system_topics("qm1", q).receipts)}
    assert id_block_topic("qm1") not in system
    with pytest.raises(InvalidParameter):
        id_block_topic("")


# --- topics_for_path -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "topic"),
    [
        (".\\private$\\orders", "kmq.local.private.orders"),
        (".\\orders", "kmq.local.public.orders"),
        ("Remote\\private$\\Orders", "kmq.remote.private.orders"),
        ("host.example.com\\orders", "kmq.host_2eexample_2ecom.public.orders"),
        (".\\private$\\orders\\journal$", "kmq.local.private.orders.journal"),
        (".\\private$\\orders;poison", "kmq.local.private.orders.sub.poison"),
        (".\\Deadletter$", "kmq.local.system.deadletter"),
        ("remote\\XactDeadletter$", "kmq.remote.system.deadxact"),
        (".\\Journal$", "kmq.local.system.journal"),
        (".\\private$\\pay$ me", "kmq.local.private.pay_24_20me"),
    ],
)
def test_topics_for_path(path: str, topic: str) -> None:
    topics = topics_for_path(parse_path_name(path), "LOCAL")
    assert topics.data == topic
    assert topics.receipts == topic + ".receipts"


# --- topic_role ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "role"),
    [
        ("kmq.qm.private.orders", TopicRole.MESSAGES),
        ("kmq.qm.public.orders.receipts", TopicRole.RECEIPTS),
        # a queue named "receipts" is a data topic; its receipts topic ends twice in receipts
        ("kmq.qm.private.receipts", TopicRole.MESSAGES),
        ("kmq.qm.private.receipts.receipts", TopicRole.RECEIPTS),
        ("kmq.qm.private.orders.journal", TopicRole.MESSAGES),
        ("kmq.qm.private.orders.journal.receipts", TopicRole.RECEIPTS),
        ("kmq.qm.private.orders.sub.poison", TopicRole.MESSAGES),
        ("kmq.qm.private.orders.sub.poison.receipts", TopicRole.RECEIPTS),
        ("kmq.qm.system.deadletter", TopicRole.MESSAGES),
        ("kmq.qm.system.deadxact.receipts", TopicRole.RECEIPTS),
        ("__kmq.queues", TopicRole.REGISTRY),
        ("__kmq.queue_managers", TopicRole.REGISTRY),
        ("orders", None),
        ("__consumer_offsets", None),
        ("kmq.qm.private", None),
        ("kmq.qm.system.other", None),
        ("kmq.qm.system.deadletter.journal", None),
        ("kmq.qm.private.orders.journal.sub", None),
        ("kmq.qm.private.orders.sub", None),
        ("kmq.qm.other.orders", None),
        ("kmq..private.orders", None),
    ],
)
def test_topic_role(topic: str, role: TopicRole | None) -> None:
    assert topic_role(topic) is role


@given(queue_manager_names, mixed_names, st.booleans(), mixed_names)
def test_every_topic_kmq_names_has_its_role(qm: str, name: str, private: bool, sub: str) -> None:
    topics = queue_topics(qm, name, private=private)
    system = system_topics(qm, SystemQueue.JOURNAL)
    for each in (topics, topics.journal(), topics.subqueue(sub), system):
        assert topic_role(each.data) is TopicRole.MESSAGES
        assert topic_role(each.receipts) is TopicRole.RECEIPTS
