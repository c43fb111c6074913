"""``kmq dev``: the local dev stack (loopback broker and embedded directory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from facade.cli._output import JsonOption, emit, fail_on_errors, key_value_table

if TYPE_CHECKING:
    from facade.kafka.devstack import DevStatus


def _stack():  # noqa: ANN202 - DevStack, imported when a command runs (start-up time)
    from facade.config import KmqConfig
    from facade.kafka.devstack import DevStack

    return DevStack(KmqConfig.load())


app = typer.Typer(help="Start, stop and inspect the local dev stack (broker + embedded directory).",
                  no_args_is_help=True)


def _render(status: DevStatus):
    broker = status.broker
    rows = [("broker", "not running" if broker is None else
             f"Apache Kafka {broker.version}, {len(broker.nodes)} node(s), KRaft combined mode"
             + (f", ready in {broker.ready_seconds} s" if broker.ready_seconds is not None else ""))]
    if broker is not None:
        rows.append(("bootstrap servers", f"{broker.bootstrap_servers} ({broker.security_protocol})"))
        rows += [(f"node {node.node_id}",
                  f"{'running, pid ' + str(node.pid) if node.alive() else 'stopped'}, "
                  f"log {broker.log_path(node.node_id)}") for node in broker.nodes]
        rows.append(("data", str(broker.root)))
    rows.append(("directory", f"embedded, {status.directory_path}"
                 + ("" if status.directory_initialized else " (not initialised)")))
    rows += [("warning", w) for w in status.warnings]
    return key_value_table("kmq dev stack", rows)


BrokersOption = typer.Option(
    None, "--brokers", min=1, max=9,
    help="Nodes of a new cluster: 1, or 3 for three KRaft voters with replication factor 3 and "
         "min.insync.replicas 2 for kmq's topics. Default: the existing cluster's, or 1.")


@app.command()
def up(brokers: int | None = BrokersOption, as_json: bool = JsonOption) -> None:
    """Start Apache Kafka (KRaft) on free 127.0.0.1 ports and initialise the embedded directory.

    The broker's jars are resolved from Maven Central by Maven on first use (a JDK 17+ and mvn
    are needed), cached, and reused. Data lives under $KMQ_HOME/dev/kafka and survives
    `kmq dev down` and crashes.

    Example: kmq dev up --brokers 3 && kmq dev status
    """
    with fail_on_errors(as_json):
        status = _stack().up(brokers)
    emit(status.to_dict(), as_json, lambda _: _render(status))


@app.command()
def down(as_json: bool = JsonOption) -> None:
    """Stop the local Kafka cluster (controlled shutdown); its queues and messages are kept."""
    with fail_on_errors(as_json):
        stopped = _stack().down()
    emit({"stopped": stopped}, as_json,
         lambda _: "local broker stopped" if stopped else "no local broker was running")


@app.command()
def status(as_json: bool = JsonOption) -> None:
    """Show what runs where: Kafka version, nodes, ports, time to ready, directory, warnings."""
    with fail_on_errors(as_json):
        current = _stack().status()
    emit(current.to_dict(), as_json, lambda _: _render(current))
