"""Sending a DataFrame's rows as kmq messages: :func:`write_messages` (a batch job) and
:func:`write_stream` (a streaming query), through ``format("kmq")``.

Above both the data source (:mod:`spark_connector.datasource`, which registers
``format("kmq")``) and the writers it plans (:mod:`spark_connector.sink`), so neither imports the
other's caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from facade.errors import InvalidParameter
from spark_connector.datasource import register
from spark_connector.sink import writer_options

__all__ = ["write_messages", "write_stream"]


def _ensure_registered(spark: Any) -> None:
    """Register ``format("kmq")`` unless the session already has one (perhaps a subclass)."""
    try:
        exists = spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("kmq")
    except Exception:  # noqa: BLE001 - no JVM session (Spark Connect): just register
        exists = False
    if exists:
        return

    register(spark)


def write_messages(df: Any, format_name: str, **kwargs: Any) -> None:
    r"""Send every row of ``df`` as a message to ``format_name`` (a batch job).

    Example::

        write_messages(df.selectExpr("payload AS body", "5 AS priority"),
                       "DL=3fed2168-b902-4dbf-a98e-4ebb264a461b", label="nightly",
                       delivery="RECOVERABLE", bootstrap_servers="broker:9092")

    Args:
        df (DataFrame): rows with a ``body`` column and optional message columns.
        format_name (str): any queue, ``PUBLIC=``, ``DL=`` or multiple-element format name.
        **kwargs: :func:`writer_options` arguments (configuration, ``transactional``,
            ``write_id``, ``flush_timeout``, ``admin_queues``) and message defaults
            (``label=``, ``priority=``...).

    Raises:
        AccessDenied: the driver's principal may not write to a queue ``format_name`` reaches,
            or to an admin queue the messages may ask acknowledgments on (see
            :func:`writer_options`); nothing is written.
        InvalidParameter, FormatNameError, QueueNotFound...: see :func:`writer_options`.
        Py4JJavaError / pyspark errors: a task failed for good (its cause names the row or the
            broker error, or a row asking for acknowledgments on an admin queue the driver did
            not check). Messages of partitions that finished stay delivered; re-run with the
            same ``write_id`` to finish without duplicates.
    """
    options = writer_options(df.schema, format_name, **kwargs)
    _ensure_registered(df.sparkSession)
    df.write.format("kmq").mode("append").options(**options).save()


def write_stream(df: Any, format_name: str, *, checkpoint_location: str,
                 trigger: Mapping[str, Any] | None = None, query_name: str | None = None,
                 output_mode: str = "append", **kwargs: Any) -> Any:
    """Start a streaming query sending every row of ``df`` to ``format_name``.

    Exactly-once per micro-batch: a batch replayed after a failure resends the same message ids
    and receivers drop the copies (within the dedupe window, see ``docs/spark.md``).

    Args:
        df (DataFrame): a streaming DataFrame with a ``body`` column and optional message columns.
        format_name (str): resolved once, at start: members added to a distribution list later
            get messages after the query restarts.
        checkpoint_location (str): Spark checkpoint directory; it keeps the query id, so keep it
            to keep exactly-once across restarts.
        trigger (Mapping[str, Any] | None): ``DataStreamWriter.trigger`` arguments, e.g.
            ``{"processingTime": "5 seconds"}`` or ``{"availableNow": True}``; default: Spark's.
        query_name (str | None): ``queryName``.
        output_mode (str): ``append`` (default) or ``update`` for aggregations: every row
            Spark emits becomes a message.
        **kwargs: :func:`writer_options` arguments and message defaults.

    Returns:
        StreamingQuery: the started query.

    Raises:
        AccessDenied: as :func:`write_messages`; a right revoked while the query runs fails it
            at the end of the micro-batch in progress.
        InvalidParameter, FormatNameError, QueueNotFound...: see :func:`writer_options`.
    """
    if kwargs.get("write_id"):
        raise InvalidParameter("write_id is for batch writes: a streaming query keys its ids "
                               "by query id and batch id")
    options = writer_options(df.schema, format_name, **kwargs)
    _ensure_registered(df.sparkSession)
    writer = (df.writeStream.format("kmq").outputMode(output_mode).options(**options)
              .option("checkpointLocation", checkpoint_location))
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()

