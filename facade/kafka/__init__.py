"""Kafka, the durable log under every queue: the seam kmq uses of it and its implementations.

The ``KafkaSession`` protocol, the part of Kafka kmq uses (:mod:`.kafkaseam`); its librdkafka
implementation over confluent-kafka, the only module that imports ``confluent_kafka`` apart
from the ACL admin API in :mod:`facade.state.kafka_acl_admin` (:mod:`.librdkafka`); the
in-memory implementation for unit tests (:mod:`.memorykafka`); and the local Apache Kafka
KRaft broker of ``kmq dev up``, the tests, the demo and the benchmarks: its jars from Maven
Central (:mod:`.mavenjars`), its processes and log dirs (:mod:`.localkafka`), and the dev stack
that starts it with the embedded directory (:mod:`.devstack`).

May import: the foundation modules, :mod:`facade.model`, :mod:`facade.security` and
:mod:`facade.directory`.
"""
