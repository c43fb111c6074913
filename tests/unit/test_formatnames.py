"""Tests for facade.model.formatnames: MSMQ path names and format names."""

from __future__ import annotations

import pickle
import socket
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from facade.errors import FormatNameError, InvalidParameter, UnsupportedFormatNameOperation
from facade.model.formatnames import (
    MAX_QUEUE_NAME_LENGTH,
    MAX_SUBQUEUE_NAME_LENGTH,
    DirectFormatName,
    DirectProtocol,
    DistributionListFormatName,
    FormatName,
    MachineFormatName,
    MulticastFormatName,
    MultipleElementFormatName,
    PrivateFormatName,
    PublicFormatName,
    QueuePath,
    Suffix,
    SystemQueue,
    parse_format_name,
    parse_path_name,
    parse_queue_reference,
    path_to_format_name,
)

QGUID = "2d0ab4c6-1e2b-11d2-a8a1-00aa00b3c4d5"
CGUID = "ae0c5671-f190-12ce-ae10-00dd0114290f"
MGUID = "308FB580-1EB2-11CA-923B-08002B1075A7"
FAST = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_round_trips(fn: FormatName) -> None:
    assert parse_format_name(str(fn)) == fn
    assert str(parse_format_name(str(fn))) == str(fn)
    assert hash(parse_format_name(str(fn))) == hash(fn)


def reject(
    text: str, position: int, fragment: str = "", parse=parse_format_name
) -> FormatNameError:
    with pytest.raises(FormatNameError) as info:
        parse(text)
    error = info.value
    assert error.text == text
    assert error.position == position, str(error)
    assert fragment in str(error)
    assert isinstance(error, ValueError)
    return error


# ------------------------------------------------------------------------------------------
# Examples from msmq-reference.md section 1 and the seeds
# ------------------------------------------------------------------------------------------


def test_public_with_journal():
    fn = parse_format_name(f"PUBLIC={QGUID};JOURNAL")
    assert isinstance(fn, PublicFormatName)
    assert fn.queue_id == uuid.UUID(QGUID)
    assert fn.journal and fn.suffix is Suffix.JOURNAL
    assert fn.is_journal and fn.is_read_only and not fn.can_send and fn.can_receive
    assert fn.requires_directory
    assert str(fn) == f"PUBLIC={QGUID};JOURNAL"
    assert fn.without_suffix() == parse_format_name(f"PUBLIC={QGUID}")
    assert_round_trips(fn)


def test_private():
    fn = parse_format_name(f"PRIVATE={CGUID}\\0000000d")
    assert isinstance(fn, PrivateFormatName)
    assert fn.machine_id == uuid.UUID(CGUID) and fn.queue_number == 0xD
    assert fn.suffix is Suffix.NONE and fn.can_send and fn.can_receive
    assert not fn.requires_directory and not fn.is_read_only
    assert str(fn) == f"PRIVATE={CGUID}\\0000000d"
    assert parse_format_name(f"private={CGUID.upper()}\\D") == fn
    assert_round_trips(fn)


def test_direct_tcp():
    fn = parse_format_name("DIRECT=TCP:10.0.0.5\\private$\\q")
    assert isinstance(fn, DirectFormatName)
    assert fn.protocol is DirectProtocol.TCP and fn.address == "10.0.0.5"
    assert fn.private and fn.queue_name == "q" and fn.suffix is Suffix.NONE
    assert fn.can_send and fn.can_receive and not fn.requires_directory
    assert fn.elements == (fn,) and not fn.is_multiple_element
    assert_round_trips(fn)


def test_direct_system_dead_xact():
    fn = parse_format_name("DIRECT=OS:host\\SYSTEM$;DEADXACT")
    assert isinstance(fn, DirectFormatName)
    assert fn.system_queue is SystemQueue.DEADXACT and fn.queue_name is None
    assert fn.suffix is Suffix.DEADXACT
    assert fn.is_transactional_dead_letter and fn.is_dead_letter and fn.is_read_only
    assert not fn.can_send and fn.can_receive
    assert str(fn) == "DIRECT=OS:host\\SYSTEM$;DEADXACT"
    assert_round_trips(fn)
    with pytest.raises(UnsupportedFormatNameOperation):
        fn.without_suffix()


@pytest.mark.parametrize("queue", ["JOURNAL", "DEADLETTER", "DEADXACT"])
def test_direct_system_queues(queue):
    fn = parse_format_name(f"direct=os:Host\\system$;{queue.lower()}")
    assert fn.system_queue is SystemQueue[queue] and fn.suffix is Suffix[queue]
    assert fn.is_read_only and not fn.can_send
    assert str(fn) == f"DIRECT=OS:host\\SYSTEM$;{queue}"


def test_direct_url_https():
    fn = parse_format_name("DIRECT=https://host/msmq/private$/q")
    assert isinstance(fn, DirectFormatName)
    assert fn.protocol is DirectProtocol.HTTPS and fn.is_url
    assert fn.address == "host" and fn.url_port is None and fn.virtual_directory == "msmq"
    assert fn.private and fn.queue_name == "q"
    assert fn.can_send and not fn.can_receive
    assert str(fn) == "DIRECT=https://host/msmq/private$/q"
    assert_round_trips(fn)
    with pytest.raises(UnsupportedFormatNameOperation):
        fn.with_subqueue("poison")


def test_direct_url_ports_and_case():
    assert str(parse_format_name("DIRECT=HTTP://Host:80/MSMQ/Q")) == "DIRECT=http://host/msmq/q"
    assert str(parse_format_name("DIRECT=https://h:443/msmq/q")) == "DIRECT=https://h/msmq/q"
    fn = parse_format_name("DIRECT=https://h.example:8443/Custom/Private$/Orders")
    assert fn.url_port == 8443 and fn.virtual_directory == "custom"
    assert str(fn) == "DIRECT=https://h.example:8443/custom/private$/orders"
    assert_round_trips(fn)


def test_subqueue():
    fn = parse_format_name("DIRECT=OS:m\\private$\\orders;poison")
    assert fn.subqueue == "poison" and fn.suffix is Suffix.SUBQUEUE
    assert not fn.can_send and fn.can_receive and not fn.is_read_only
    assert fn.without_suffix() == parse_format_name("DIRECT=OS:m\\private$\\orders")
    assert fn.with_subqueue("Retry") == parse_format_name("DIRECT=OS:m\\private$\\orders;retry")
    assert fn.with_journal() == parse_format_name("DIRECT=OS:m\\private$\\orders;JOURNAL")
    assert_round_trips(fn)


def test_distribution_list():
    fn = parse_format_name(f"DL={CGUID}@corp.example")
    assert isinstance(fn, DistributionListFormatName)
    assert fn.list_id == uuid.UUID(CGUID) and fn.domain == "corp.example"
    assert fn.requires_directory and fn.can_send and not fn.can_receive
    assert_round_trips(fn)
    assert parse_format_name(f"DL={CGUID}").domain is None


def test_machine_dead_xact():
    fn = parse_format_name(f"MACHINE={MGUID};DEADXACT")
    assert isinstance(fn, MachineFormatName)
    assert fn.machine_id == uuid.UUID(MGUID) and fn.system_queue is SystemQueue.DEADXACT
    assert fn.is_read_only and fn.is_transactional_dead_letter and not fn.can_send
    assert str(fn) == f"MACHINE={MGUID.lower()};DEADXACT"
    assert_round_trips(fn)


def test_multicast():
    fn = parse_format_name("MULTICAST=234.1.1.1:8001")
    assert isinstance(fn, MulticastFormatName)
    assert fn.address == "234.1.1.1" and fn.port == 8001
    assert fn.can_send and not fn.can_receive and not fn.requires_directory
    assert_round_trips(fn)


def test_multiple_element_direct_public_dl():
    text = f"DIRECT=OS:host\\private$\\q,PUBLIC={QGUID},DL={CGUID}@corp.example"
    fn = parse_format_name(text)
    assert isinstance(fn, MultipleElementFormatName)
    kinds = [type(e) for e in fn.elements]
    assert kinds == [DirectFormatName, PublicFormatName, DistributionListFormatName]
    assert fn.is_multiple_element and fn.requires_directory
    assert fn.can_send and not fn.can_receive and not fn.is_read_only
    assert fn.suffix is Suffix.NONE
    assert str(fn) == text
    assert_round_trips(fn)


def test_multiple_element_offline_capable():
    fn = parse_format_name(f"DIRECT=OS:a\\q,PRIVATE={CGUID}\\1,MULTICAST=224.0.0.1:1")
    assert not fn.requires_directory and len(fn.elements) == 3


def test_equality_is_on_normalised_fields():
    a = parse_format_name("direct=os:HOST\\PRIVATE$\\Orders")
    assert a == parse_format_name("DIRECT=OS:host\\private$\\orders")
    assert str(a) == "DIRECT=OS:host\\private$\\orders"
    assert len({a, parse_format_name("  FormatName:DIRECT=OS:host\\private$\\ORDERS \n")}) == 1
    assert parse_format_name(f"Public={{{QGUID.upper()}}}") == parse_format_name(f"PUBLIC={QGUID}")


def test_format_name_prefix():
    fn = parse_format_name(f"FORMATNAME:PUBLIC={QGUID}")
    assert fn == parse_format_name(f"formatname:public={QGUID}")
    assert fn == parse_format_name(f"PUBLIC={QGUID}")


@pytest.mark.parametrize(
    "text",
    [
        "DIRECT=OS:.\\private$\\q",
        "DIRECT=OS:my-host.corp.example\\Orders",
        "DIRECT=OS:host\\queue with spaces",
        "DIRECT=SPX:12:a0c9123456\\q",
        "DIRECT=IPX:00000012:00a0c9123456\\private$\\q;JOURNAL",
        "DIRECT=TCP:0.0.0.0\\q;sub",
        f"PUBLIC={QGUID};poison",
        f"PRIVATE={CGUID}\\ffffffff;JOURNAL",
        "DIRECT=OS:host\\private$\\Заказы",
        "DIRECT=OS:h\\" + "q" * MAX_QUEUE_NAME_LENGTH,
        "DIRECT=OS:h\\q;" + "s" * MAX_SUBQUEUE_NAME_LENGTH,
        "DIRECT=OS:h\\system$x",
        "DIRECT=OS:h\\private$x",
        "MULTICAST=239.255.255.255:65535",
        "MULTICAST=224.0.0.0:0",
    ],
)
def test_more_valid_names_round_trip(text):
    assert_round_trips(parse_format_name(text))


def test_spx_address_canonical():
    fn = parse_format_name("DIRECT=SPX:12:A0C9123456\\q")
    assert fn.address == "00000012:00a0c9123456"


def test_elements_of_single_names():
    for text in [f"DL={CGUID}", "MULTICAST=234.1.1.1:1", f"MACHINE={MGUID};JOURNAL"]:
        fn = parse_format_name(text)
        assert fn.elements == (fn,) and not fn.is_multiple_element


def test_format_names_are_frozen_hashable_and_picklable():
    fn = parse_format_name(f"DIRECT=OS:h\\q,PUBLIC={QGUID}")
    with pytest.raises(AttributeError):
        fn.elements = ()  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(fn)) == fn
    assert {fn: 1}[parse_format_name(str(fn))] == 1


def test_multiple_element_constructor_checks_elements():
    direct = parse_format_name("DIRECT=OS:h\\q")
    journal = parse_format_name("DIRECT=OS:h\\q;JOURNAL")
    with pytest.raises(FormatNameError) as info:
        MultipleElementFormatName((direct, journal))
    assert info.value.position == len("DIRECT=OS:h\\q,")
    with pytest.raises(FormatNameError):
        MultipleElementFormatName((direct,))
    with pytest.raises(InvalidParameter, match="elements must be FormatName objects"):
        MultipleElementFormatName((direct, "DIRECT=OS:h\\r"))  # type: ignore[arg-type]


def test_direct_explicit_default_port_normalised():
    fn = DirectFormatName(DirectProtocol.HTTP, "h", "q", url_port=80, virtual_directory="msmq")
    assert fn == parse_format_name("DIRECT=http://h/msmq/q")


def test_public_api_is_exported_and_documented():
    import inspect

    import facade.model.formatnames as module

    public = {n for n, v in vars(module).items() if not n.startswith("_") and v is not None}
    public -= {"annotations", "abc", "dataclasses", "enum", "socket", "unicodedata", "uuid"}
    public -= {"dataclass", "NoReturn", "Self", "FormatNameError", "InvalidParameter",
               "QueuePathNameError", "UnsupportedFormatNameOperation"}
    assert set(module.__all__) == public
    for name in module.__all__:
        item = getattr(module, name)
        if inspect.isclass(item) or inspect.isfunction(item):
            assert inspect.getdoc(item), name
    # Public members of every class, including those inherited from private mixins.
    exported = [getattr(module, name) for name in module.__all__]
    public_classes = [item for item in exported if inspect.isclass(item)]
    for cls in {base for c in public_classes for base in c.__mro__}:
        if cls.__module__ != module.__name__:
            continue
        for attr, member in vars(cls).items():
            documentable = inspect.isfunction(member) or isinstance(member, property)
            if documentable and not attr.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{attr}"


def test_suffix_codes():
    assert [s.value for s in Suffix] == [0, 1, 2, 3, 4, 5]
    assert [s.name for s in Suffix] == [
        "NONE", "JOURNAL", "DEADLETTER", "DEADXACT", "XACTONLY", "SUBQUEUE"
    ]


# ------------------------------------------------------------------------------------------
# Rejections
# ------------------------------------------------------------------------------------------

BAD_GUID = "2d0ab4c6-1e2b-11d2-a8a1-00aa00b3c4dx"


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        (f"PUBLIC={BAD_GUID}", 42, "hex digit in queue GUID"),
        ("PUBLIC=2d0ab4c6_1e2b-11d2-a8a1-00aa00b3c4d5", 15, "expected '-'"),
        ("PUBLIC=2d0ab4c6", 15, "expected '-'"),
        (f"PUBLIC={{{QGUID}", 44, "expected '}'"),
        (f"PUBLIC={QGUID}0", 43, "expected ';JOURNAL'"),
        ("PUBLIC=" + "٢" + QGUID[1:], 7, "hex digit"),
        ("DIRECT=OS:h\\" + "q" * 125, 12 + 124, "queue name longer than 124 characters"),
        ("DIRECT=OS:h\\a+b", 13, "cannot contain '+'"),
        ('DIRECT=OS:h\\a"b', 13, "cannot contain '\"'"),
        ("DIRECT=OS:h\\a\rb", 13, "cannot contain '\\r'"),
        ("DIRECT=OS:h\\a\tb", 13, "whitespace"),
        ("DIRECT=OS:h\\a\x00b", 13, "control"),
        ("DIRECT=OS:h\\ a", 12, "start or end with a space"),
        ("DIRECT=OS:h\\private$\\a\\b", 22, "cannot contain '\\\\'"),
        ("DIRECT=OS:h\\q;" + "s" * 33, 14 + 32, "subqueue name longer than 32 characters"),
        ("DIRECT=OS:h\\q;a;b", 15, "cannot contain ';'"),
        ("DIRECT=OS:h\\q;", 14, "expected a subqueue name"),
        ("DIRECT=OS:h\\q;DEADLETTER", 14, "suffix keyword"),
        ("DIRECT=OS:h\\private$", 20, "after 'private$'"),
        ("DIRECT=OS:h\\system$", 19, "system queue after SYSTEM$"),
        ("DIRECT=OS:h\\SYSTEM$;POISON", 20, "expected JOURNAL, DEADLETTER or DEADXACT"),
        ("DIRECT=OS:h\\journal$", 12, "reserved"),
        ("DIRECT=OS:h\\", 12, "expected a queue name"),
        ("DIRECT=OS:h", 11, "expected '\\'"),
        ("DIRECT=OS:bad host\\q", 13, "computer name cannot contain ' '"),
        ("DIRECT=OS:a..b\\q", 12, "empty label"),
        ("DIRECT=TCP:999.1.1.1\\q", 11, "greater than 255"),
        ("DIRECT=TCP:10.0.0\\q", 17, "expected '.'"),
        ("DIRECT=TCP:10.0.0.05\\q", 18, "leading zero"),
        ("DIRECT=TCP:host\\q", 11, "expected a number 0-255 in IPv4 address"),
        ("DIRECT=SPX:123\\q", 11, "network:node"),
        ("DIRECT=IPX:123456789:1\\q", 19, "longer than 8 hex digits"),
        ("DIRECT=FTP:h\\q", 7, "expected a protocol"),
        ("DIRECT=HTTP:h\\q", 7, "expected a protocol"),
        ("DIRECT=http://h/msmq/q;JOURNAL", 22, "send-only"),
        ("DIRECT=https://h/msmq/private$/q;poison", 32, "send-only"),
        ("DIRECT=http://h/msmq/a/b", 22, "cannot contain '/'"),
        ("DIRECT=http://h/msmq", 20, "expected '/'"),
        ("DIRECT=http://h:0/msmq/q", 16, "port 0"),
        ("DIRECT=http://h:70000/msmq/q", 16, "greater than 65535"),
        ("DIRECT=http://h/ms mq/q", 18, "virtual directory cannot contain"),
        ("DIRECT=http://h/msmq/private$/system$", 30, "reserved"),
        (f"MACHINE={MGUID}", 44, "needs ';'"),
        (f"MACHINE={MGUID};POISON", 45, "expected JOURNAL"),
        ("MULTICAST=10.1.1.1:8001", 10, "class D"),
        ("MULTICAST=240.0.0.1:8001", 10, "class D"),
        ("MULTICAST=234.1.1.1:65536", 20, "greater than 65535"),
        ("MULTICAST=234.1.1.1:-1", 20, "decimal digit"),
        ("MULTICAST=234.1.1.1", 19, "expected ':'"),
        (f"DL={CGUID};JOURNAL", 39, "expected '@domain'"),
        (f"DL={CGUID}@", 40, "expected a domain name"),
        ("FOO=bar", 0, "expected one of PUBLIC=, PRIVATE=, DIRECT=, DL=, MACHINE=, MULTICAST="),
        ("PUBLİC=" + QGUID, 0, "expected one of"),
        ("DIRECT =OS:h\\q", 0, "expected one of"),
        ("DIRECT=OS:h\\q , DL=" + CGUID, 13, "space"),
        ("FormatName:", 11, "expected a format name"),
        ("FormatName: DIRECT=OS:h\\q", 11, "expected one of"),
        ("", 0, "empty"),
        ("   ", 0, "empty"),
    ],
)
def test_rejections(text, position, fragment):
    reject(text, position, fragment)


@pytest.mark.parametrize(
    ("text", "position", "kind"),
    [
        (f"DIRECT=OS:h\\q,PUBLIC={QGUID};JOURNAL", 14, "journal"),
        (f"PUBLIC={QGUID},DIRECT=OS:h\\SYSTEM$;DEADLETTER", 44, "dead-letter queue"),
        (f"DIRECT=OS:h\\SYSTEM$;DEADXACT,PUBLIC={QGUID}", 0, "transactional dead-letter queue"),
        (f"DIRECT=OS:h\\q,MACHINE={MGUID};JOURNAL", 14, "journal"),
        (f"DIRECT=OS:h\\q,PRIVATE={CGUID}\\1;JOURNAL", 14, "journal"),
    ],
)
def test_read_only_queue_in_multiple_element_name(text, position, kind):
    error = reject(text, position, f"read-only queue ({kind}) not allowed")
    assert "only be read" in (error.hint or "")


def test_subqueue_in_multiple_element_name():
    reject("DIRECT=OS:h\\q,DIRECT=OS:h\\q;poison", 14, "subqueue not allowed")


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("DIRECT=OS:h\\q,,DIRECT=OS:h\\r", 14),
        ("DIRECT=OS:h\\q,", 13),
        (",DIRECT=OS:h\\q", 0),
        ("DIRECT=OS:h\\q,DIRECT=OS:h\\r,", 27),
    ],
)
def test_empty_elements(text, position):
    reject(text, position, "empty element")


def test_errors_inside_elements_point_into_whole_text():
    text = f"  DIRECT=OS:h\\q,PUBLIC={BAD_GUID}"
    reject(text, text.index("x"), "hex digit")


def test_path_name_given_as_format_name_gets_a_hint():
    error = reject(".\\private$\\q", 0, "expected one of")
    assert "path name" in (error.hint or "")


def test_non_str_input_is_invalid_parameter():
    for parse in (parse_format_name, parse_path_name, parse_queue_reference, path_to_format_name):
        with pytest.raises(InvalidParameter, match="must be a (str|QueuePath)"):
            parse(None)  # type: ignore[arg-type]
        with pytest.raises(InvalidParameter, match="not bytes"):
            parse(b"DIRECT=OS:h\\q")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# Path names
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        (".\\private$\\Orders", ".\\private$\\orders"),
        (".\\PRIVATE$\\Orders;Poison", ".\\private$\\orders;poison"),
        ("Host\\Public Queue", "host\\public queue"),
        ("HOST.corp.example\\q\\Journal$", "host.corp.example\\q\\journal$"),
        ("h\\private$\\q\\JOURNAL$", "h\\private$\\q\\journal$"),
        ("h\\Journal$", "h\\journal$"),
        ("h\\Deadletter$", "h\\deadletter$"),
        ("h\\XactDeadletter$", "h\\xactdeadletter$"),
        ("h\\journal$x", "h\\journal$x"),
    ],
)
def test_path_names(text, canonical):
    path = parse_path_name(text)
    assert isinstance(path, QueuePath)
    assert str(path) == canonical
    assert parse_path_name(canonical) == path


def test_path_name_fields():
    path = parse_path_name(".\\private$\\Orders;Poison")
    assert path.machine == "." and path.is_local and path.is_private
    assert path.queue_name == "orders" and path.subqueue == "poison"
    assert path.suffix is Suffix.SUBQUEUE and not path.is_read_only
    remote = path.with_machine("Box")
    assert remote.machine == "box" and not remote.is_local
    assert path.without_suffix() == parse_path_name(".\\private$\\orders")
    assert path.with_journal() == parse_path_name(".\\private$\\orders\\journal$")
    assert path.with_subqueue("retry") == parse_path_name(".\\private$\\orders;retry")
    system = parse_path_name("h\\XactDeadletter$")
    assert system.system_queue is SystemQueue.DEADXACT and system.queue_name is None
    assert system.is_read_only and system.suffix is Suffix.DEADXACT
    with pytest.raises(UnsupportedFormatNameOperation):
        system.with_subqueue("x")


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("orders", 6, "expected '\\'"),
        ("h\\", 2, "expected a queue name"),
        ("h\\a\\b", 4, "expected 'journal$'"),
        ("h\\q\\journal$;x", 12, "expected the end"),
        ("h\\private$", 10, "after 'private$'"),
        ("h\\journal$;x", 10, "nothing may follow"),
        ("h\\q;journal", 4, "suffix keyword"),
        ("h\\private$\\private$", 11, "reserved"),
        ("h\\q;" + "s" * 33, 4 + 32, "longer than 32"),
        ("h\\" + "q" * 125, 2 + 124, "longer than 124"),
        ("h_!\\q", 2, "computer name cannot contain '!'"),
        ("DIRECT=OS:h\\q", 0, "not a format name"),
        ("FormatName:h\\q", 11, "not a format name"),
    ],
)
def test_path_name_rejections(text, position, fragment):
    reject(text, position, fragment, parse=parse_path_name)


def test_with_machine_and_with_subqueue_validate():
    path = parse_path_name(".\\q")
    with pytest.raises(FormatNameError):
        path.with_machine("bad host")
    with pytest.raises(FormatNameError) as info:
        path.with_subqueue("s" * 33)
    assert info.value.position == 32


@pytest.mark.parametrize(
    ("path", "machine", "expected"),
    [
        (".\\private$\\Orders", "Box", "DIRECT=OS:box\\private$\\orders"),
        ("Host\\q", "ignored", "DIRECT=OS:host\\q"),
        (".\\q\\journal$", "m", "DIRECT=OS:m\\q;JOURNAL"),
        (".\\private$\\q;poison", "m", "DIRECT=OS:m\\private$\\q;poison"),
        ("h\\Journal$", None, "DIRECT=OS:h\\SYSTEM$;JOURNAL"),
        ("h\\Deadletter$", None, "DIRECT=OS:h\\SYSTEM$;DEADLETTER"),
        ("h\\XactDeadletter$", None, "DIRECT=OS:h\\SYSTEM$;DEADXACT"),
    ],
)
def test_path_to_format_name(path, machine, expected):
    fn = path_to_format_name(path, machine)
    assert isinstance(fn, DirectFormatName) and str(fn) == expected
    assert fn == path_to_format_name(parse_path_name(path), machine)
    assert fn == parse_path_name(path).to_format_name(machine)


def test_path_to_format_name_default_machine(monkeypatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "BuildBox")
    assert str(path_to_format_name(".\\private$\\q")) == "DIRECT=OS:buildbox\\private$\\q"
    monkeypatch.setattr(socket, "gethostname", lambda: "bad host")
    with pytest.raises(FormatNameError) as info:
        path_to_format_name(".\\q")
    assert "machine=" in (info.value.hint or "")


def test_path_to_format_name_rejects_bad_machine():
    with pytest.raises(FormatNameError):
        path_to_format_name(".\\q", ".")


# ------------------------------------------------------------------------------------------
# parse_queue_reference
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("DIRECT=OS:h\\q", DirectFormatName),
        (f"PUBLIC={QGUID}", PublicFormatName),
        ("FormatName:MULTICAST=234.1.1.1:1", MulticastFormatName),
        (".\\private$\\q", QueuePath),
        ("h\\q=1", QueuePath),
        (f"DIRECT=OS:h\\q,DL={CGUID}", MultipleElementFormatName),
    ],
)
def test_parse_queue_reference(text, kind):
    assert isinstance(parse_queue_reference(text), kind)


def test_parse_queue_reference_errors_from_either_grammar():
    reject("orders", 6, "expected '\\'", parse=parse_queue_reference)
    reject("FOO=1", 0, "expected one of", parse=parse_queue_reference)


# ------------------------------------------------------------------------------------------
# Property-based tests
# ------------------------------------------------------------------------------------------

_FORBIDDEN = set('\\;+,"\r\n')
_name_chars = st.characters(
    exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"),
    exclude_characters=_FORBIDDEN,
) | st.just(" ")
_url_name_chars = st.characters(
    min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=_FORBIDDEN | set("/?#%")
)


def _is_usable_name(name: str, reserved: set[str], limit: int) -> bool:
    lowered = name.lower()
    return name.strip() == name and lowered not in reserved and len(lowered) <= limit


RESERVED_QUEUES = {"private$", "system$", "journal$", "deadletter$", "xactdeadletter$"}
RESERVED_SUBQUEUES = {"journal", "deadletter", "deadxact", "xactonly"}

queue_names = st.text(_name_chars, min_size=1, max_size=MAX_QUEUE_NAME_LENGTH).filter(
    lambda n: _is_usable_name(n, RESERVED_QUEUES, MAX_QUEUE_NAME_LENGTH)
)
url_queue_names = st.text(_url_name_chars, min_size=1, max_size=40).filter(
    lambda n: _is_usable_name(n, RESERVED_QUEUES, MAX_QUEUE_NAME_LENGTH)
)
subqueue_names = st.text(_name_chars, min_size=1, max_size=MAX_SUBQUEUE_NAME_LENGTH).filter(
    lambda n: _is_usable_name(n, RESERVED_SUBQUEUES, MAX_SUBQUEUE_NAME_LENGTH)
)


def random_case(draw, word: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if f else c.lower() for c, f in zip(word, flips))


@st.composite
def guids(draw) -> str:
    text = random_case(draw, str(uuid.UUID(int=draw(st.integers(0, 2**128 - 1)))))
    return "{" + text + "}" if draw(st.booleans()) else text


@st.composite
def hosts(draw) -> str:
    label = st.text(
        st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"),
        min_size=1,
        max_size=12,
    )
    return ".".join(draw(st.lists(label, min_size=1, max_size=4)))


@st.composite
def ipv4s(draw, first=st.integers(0, 255)) -> str:
    rest = draw(st.lists(st.integers(0, 255), min_size=3, max_size=3))
    return ".".join(str(n) for n in [draw(first), *rest])


@st.composite
def queue_suffixes(draw) -> str:
    kind = draw(st.sampled_from(["", "journal", "subqueue"]))
    if kind == "journal":
        return ";" + random_case(draw, "journal")
    return ";" + draw(subqueue_names) if kind == "subqueue" else ""


@st.composite
def sendable_elements(draw) -> str:
    """Format names allowed inside a multiple-element name."""
    kw = lambda word: random_case(draw, word)  # noqa: E731
    kind = draw(st.sampled_from(["public", "private", "direct", "url", "dl", "multicast"]))
    if kind == "public":
        return f"{kw('PUBLIC=')}{draw(guids())}"
    if kind == "private":
        number = f"{draw(st.integers(0, 0xFFFFFFFF)):x}"
        return f"{kw('PRIVATE=')}{draw(guids())}\\{random_case(draw, number)}"
    if kind == "direct":
        protocol, address = draw(
            st.sampled_from(["OS", "TCP", "SPX"]).flatmap(
                lambda p: st.tuples(
                    st.just(p),
                    hosts() | st.just(".")
                    if p == "OS"
                    else ipv4s()
                    if p == "TCP"
                    else st.from_regex(r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,12}", fullmatch=True),
                )
            )
        )
        private = kw("private$\\") if draw(st.booleans()) else ""
        return f"{kw('DIRECT=')}{kw(protocol)}:{address}\\{private}{draw(queue_names)}"
    if kind == "url":
        scheme = kw(draw(st.sampled_from(["http", "https"])))
        port = f":{draw(st.integers(1, 65535))}" if draw(st.booleans()) else ""
        private = kw("private$/") if draw(st.booleans()) else ""
        name = draw(url_queue_names)
        return f"{kw('DIRECT=')}{scheme}://{draw(hosts())}{port}/{kw('msmq')}/{private}{name}"
    if kind == "dl":
        domain = f"@{draw(hosts())}" if draw(st.booleans()) else ""
        return f"{kw('DL=')}{draw(guids())}{domain}"
    address = draw(ipv4s(first=st.integers(224, 239)))
    return f"{kw('MULTICAST=')}{address}:{draw(st.integers(0, 65535))}"


@st.composite
def single_format_names(draw) -> str:
    kw = lambda word: random_case(draw, word)  # noqa: E731
    kind = draw(st.sampled_from(["sendable", "queue suffix", "system", "machine"]))
    if kind == "sendable":
        return draw(sendable_elements())
    system = kw(draw(st.sampled_from(["JOURNAL", "DEADLETTER", "DEADXACT"])))
    if kind == "system":
        return f"{kw('DIRECT=')}{kw('OS')}:{draw(hosts())}\\{kw('SYSTEM$')};{system}"
    if kind == "machine":
        return f"{kw('MACHINE=')}{draw(guids())};{system}"
    head = draw(
        st.sampled_from(["PUBLIC", "PRIVATE", "DIRECT"]).map(
            lambda k: {
                "PUBLIC": f"{kw('PUBLIC=')}{QGUID}",
                "PRIVATE": f"{kw('PRIVATE=')}{CGUID}\\d",
                "DIRECT": f"{kw('DIRECT=OS:')}h\\{draw(queue_names)}",
            }[k]
        )
    )
    return head + draw(queue_suffixes())


@st.composite
def format_name_texts(draw) -> str:
    if draw(st.booleans()):
        text = draw(single_format_names())
    else:
        text = ",".join(draw(st.lists(sendable_elements(), min_size=2, max_size=4)))
    prefix = random_case(draw, "FormatName:") if draw(st.booleans()) else ""
    before = draw(st.sampled_from(["", " ", "\t\n"]))
    return before + prefix + text + draw(st.sampled_from(["", " "]))


@st.composite
def path_name_texts(draw) -> str:
    machine = draw(hosts() | st.just("."))
    if draw(st.integers(0, 4)) == 0:
        keyword = draw(st.sampled_from(["Journal$", "Deadletter$", "XactDeadletter$"]))
        return f"{machine}\\{random_case(draw, keyword)}"
    private = random_case(draw, "private$\\") if draw(st.booleans()) else ""
    tail = draw(
        st.sampled_from(["", "journal", "subqueue"]).flatmap(
            lambda k: st.just("")
            if k == ""
            else st.just("\\" + random_case(draw, "journal$"))
            if k == "journal"
            else subqueue_names.map(lambda s: ";" + s)
        )
    )
    return f"{machine}\\{private}{draw(queue_names)}{tail}"


@FAST
@given(format_name_texts())
def test_generated_format_names_parse_and_round_trip(text):
    fn = parse_format_name(text)
    assert parse_format_name(str(fn)) == fn
    assert str(parse_format_name(str(fn))) == str(fn)
    assert hash(parse_format_name(str(fn))) == hash(fn)
    assert parse_queue_reference(text) == fn
    assert fn.is_multiple_element == ("," in text)
    assert all(not e.is_read_only and e.can_send for e in fn.elements) or not fn.is_multiple_element


@FAST
@given(path_name_texts())
def test_generated_path_names_parse_and_round_trip(text):
    path = parse_path_name(text)
    assert parse_path_name(str(path)) == path
    assert parse_queue_reference(text) == path
    fn = path_to_format_name(path, "machine")
    assert parse_format_name(str(fn)) == fn
    assert fn.suffix is path.suffix


FRAGMENTS = [
    "DIRECT=", "OS:", "TCP:", "SPX:", "http://", "https://", "PUBLIC=", "PRIVATE=", "DL=",
    "MACHINE=", "MULTICAST=", "FormatName:", QGUID, "{", "}", "\\", "/", ";", ",", ":", "=",
    "@", ".", "$", "private$", "SYSTEM$", "JOURNAL", "DEADXACT", "journal$", "10.0.0.5",
    "234.1.1.1", "8001", "0", "h", "q", " ", "msmq", "İ", "\x00", "-", "ffff",
]


def _parses_or_raises_format_name_error(parse, text: str) -> None:
    try:
        result = parse(text)
    except FormatNameError as error:
        assert 0 <= error.position <= len(text)
        assert error.text == text
        return
    reparse = parse_path_name if isinstance(result, QueuePath) else parse_format_name
    assert reparse(str(result)) == result
    assert str(reparse(str(result))) == str(result)


# Valid heads push the fragments past the keyword into the deeper parts of the grammar.
HEADS = [
    "", "DIRECT=OS:h\\", "DIRECT=OS:h\\private$\\", "DIRECT=TCP:", "DIRECT=https://h/msmq/",
    f"PUBLIC={QGUID}", f"PRIVATE={CGUID}\\", f"DL={CGUID}", f"MACHINE={MGUID}", "MULTICAST=",
    "h\\", ".\\private$\\q", "FormatName:DIRECT=OS:h\\q,",
]
fuzz_texts = (
    st.text()
    | st.lists(st.sampled_from(FRAGMENTS), max_size=14).map("".join)
    | st.tuples(st.sampled_from(HEADS), st.lists(st.sampled_from(FRAGMENTS), max_size=6)).map(
        lambda t: t[0] + "".join(t[1])
    )
)


@settings(max_examples=500, deadline=None)
@given(fuzz_texts)
def test_arbitrary_text_parses_or_raises_format_name_error(text):
    _parses_or_raises_format_name_error(parse_format_name, text)
    _parses_or_raises_format_name_error(parse_path_name, text)
    _parses_or_raises_format_name_error(parse_queue_reference, text)


@settings(max_examples=300, deadline=None)
@given(single_format_names(), st.integers(0, 200), st.text(max_size=3))
def test_mutated_format_names_parse_or_raise(text, at, insert):
    at %= len(text) + 1
    _parses_or_raises_format_name_error(parse_format_name, text[:at] + insert + text[at:])
    _parses_or_raises_format_name_error(parse_format_name, text[:at] + text[at + 1 :])


def test_bad_path_name_reports_illegal_queue_pathname() -> None:
    from facade.errors import QueuePathNameError

    with pytest.raises(QueuePathNameError) as info:
        parse_path_name(".\\private$\\bad;name;x")
    assert info.value.error_code == "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME"
    assert info.value.hresult == 0xC00E0014
    assert isinstance(info.value, ValueError)
    assert info.value.message.count(" at position ") == 1
