"""How a message property is declared once, and the code that walks the declarations.

Each field of :class:`facade.model.message.Message` is declared with :func:`declare`, which puts a
:class:`PropertySpec` in the field's ``dataclasses`` metadata: the MSMQ property it implements
(``PROPID_M_*``), its check, where it goes in the Avro envelope (:class:`AvroField`), in the
decoded Spark columns (:class:`SparkColumn`) and whether a Spark writer may set it
(:class:`SparkInput`). Everything else is derived from those declarations:

* the property checks of :meth:`Message.validate` (in :mod:`facade.model.message`);
* the envelope mapping, message -> Avro record and back, and the Avro schema the .avsc must
  equal (:mod:`facade.model.envelope`; ``tests/unit/test_propertyspec.py`` compares them);
* Spark's decoded message columns (:mod:`spark_connector.schema`, :mod:`spark_connector.decode`)
  and the columns a Spark writer accepts (:mod:`spark_connector.sink`).

This module holds data types only: it imports nothing of kmq, so :mod:`facade.model.message` can use
it and the layers above can walk the declarations without importing Avro or Spark here.

Codec names (``AvroField.codec``, ``SparkColumn.codec``) say how a property's Python value
becomes its stored form; the module that stores it owns the conversion:

* Avro: ``plain`` (as is), ``int`` (enum or VARTYPE as a plain int), ``message_id`` (20 bytes),
  ``duration_ms`` (seconds -> milliseconds), ``instant_ms`` (datetime -> epoch milliseconds),
  ``guid_text`` (UUID -> lowercase text).
* Spark: ``plain``, ``int``, ``text`` (``str()``), ``name`` (enum member name), ``pairs``
  (a dict as key/value pairs for an Arrow map), ``record_timestamp`` (filled from the Kafka
  record, not the message), ``false`` (always false: ``authenticated`` is never taken from the
  wire).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

__all__ = [
    "AvroField",
    "CheckFactory",
    "PropertySpec",
    "SparkColumn",
    "SparkInput",
    "compile_function",
    "declare",
    "specs",
]

#: The ``dataclasses.field`` metadata key holding a field's :class:`PropertySpec`.
METADATA_KEY = "kmq.property"

#: A check factory: given the property's name and PROPID, the check of one value. The check
#: raises InvalidParameter for a bad value and may return the value normalised (enums).
CheckFactory = Callable[[str, str], Callable[[object], object]]


@dataclass(frozen=True, slots=True)
class AvroField:
    """Where a property is stored in the ``kmq.MessageEnvelope`` Avro record.

    Attributes:
        name (str): the Avro field name.
        type (Any): the Avro type as parsed JSON (docs left out; the .avsc keeps them).
        position (int): index of the field in the record (the .avsc field order).
        codec (str): Python value -> Avro value conversion (see the module docs).
    """

    name: str
    type: Any
    position: int
    codec: str = "plain"


@dataclass(frozen=True, slots=True)
class SparkColumn:
    """Where a property appears in Spark's decoded message columns
    (:data:`spark_connector.schema.MESSAGE_SCHEMA`).

    Attributes:
        type (str): the Spark type's ``simpleString()``, e.g. ``string``, ``bigint``,
            ``timestamp``, ``map<string,string>``.
        position (int): index of the column among the envelope columns.
        codec (str): Python value -> column value conversion (see the module docs).
    """

    type: str
    position: int
    codec: str = "plain"


@dataclass(frozen=True, slots=True)
class SparkInput:
    """A property a Spark writer may set from a column or a ``**message_defaults`` keyword.

    Attributes:
        kind (str): which column values it takes and how they become the property
            (``bytes``, ``int``, ``text``, ``seconds``, ``instant``, ``message_id``,
            ``properties``, ``named``: an int or enum member names; see
            :mod:`spark_connector.sink`).
        meaning (str): what the column is, for error hints.
    """

    kind: str
    meaning: str


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """Everything kmq needs to know about one message property, declared at its field.

    Attributes:
        propid (str): the MSMQ property (``PROPID_M_*``) or a kmq description, for errors.
        check (CheckFactory | None): builds the value check; None when the message checks
            the property apart (transaction fields, application properties).
        enum (type | None): the IntEnum/IntFlag an int value is converted to.
        avro (AvroField | None): its envelope field; None for receive-side state.
        spark (SparkColumn | None): its decoded Spark column; None when not shown.
        spark_input (SparkInput | None): set when a Spark writer may set it.
    """

    propid: str
    check: CheckFactory | None = None
    enum: type | None = None
    avro: AvroField | None = None
    spark: SparkColumn | None = None
    spark_input: SparkInput | None = None


def declare(default: Any = dataclasses.MISSING, *, propid: str,
            default_factory: Any = dataclasses.MISSING, check: CheckFactory | None = None,
            enum: type | None = None, avro: AvroField | None = None,
            spark: SparkColumn | None = None, spark_input: SparkInput | None = None) -> Any:
    """A ``dataclasses.field`` carrying the property's :class:`PropertySpec`.

    Args:
        default (Any): the field default; or ``default_factory`` (a callable).
        propid (str), check, enum, avro, spark, spark_input: see :class:`PropertySpec`.

    Returns:
        dataclasses.Field: to assign in the class body (typed Any for the type checker).
    """
    spec = PropertySpec(propid, check, enum, avro, spark, spark_input)
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={METADATA_KEY: spec})


def specs(cls: type) -> tuple[tuple[dataclasses.Field[Any], PropertySpec], ...]:
    """The declared fields of dataclass ``cls`` with their specs, in field order.

    Raises:
        TypeError: a field of ``cls`` was not declared with :func:`declare`; every message
            property must be, so that no derived mapping can leave it out.
    """
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(METADATA_KEY)
        if not isinstance(spec, PropertySpec):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with "
                            "facade.model.propertyspec.declare()")
        found.append((f, spec))
    return tuple(found)


def compile_function(name: str, parameter: str, expression: str,
                     namespace: dict[str, Any]) -> Callable[[Any], Any]:
    """Compile ``def name(parameter): return expression`` over ``namespace`` (a module's globals).

    The per-message mappings (envelope record, Spark row) are generated once at import from
    the declarations rather than walked field by field per message: a generated dict display or
    call with plain attribute reads costs what the hand-written mapping cost, and these run
    once per message (docs/performance.md). ``expression`` is built from declarations in kmq's
    own code, never from input.

    Args:
        name (str): the function name (shown in tracebacks as ``<kmq derived: name>``).
        parameter (str): its one parameter.
        expression (str): the returned expression.
        namespace (dict[str, Any]): globals the expression reads (helpers, classes).

    Returns:
        Callable[[Any], Any]: the function.
    """
    source = f"def {name}({parameter}):\n    return {expression}\n"
    local: dict[str, Any] = {}
    exec(compile(source, f"<kmq derived: {name}>", "exec"), namespace, local)  # noqa: S102
    return cast(Callable[[Any], Any], local[name])
