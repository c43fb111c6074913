"""State kept in Kafka: what a queue holds, rebuilt from its topics, and the records beside it.

A queue's index of pending, removed and locked messages (:mod:`.queuestate`), its snapshot
record (:mod:`.snapshot`) and which receipts may be deleted (:mod:`.retention`); the view a
handle reads a queue through (:mod:`.queueview`, over :mod:`.recordcache`) and the counts of many
queues at once (:mod:`.queuecounts`); the queue registry with each queue's properties and
security descriptor (:mod:`.registry`); message-id blocks (:mod:`.sequence`); the outgoing
queue's SQLite file (:mod:`.outgoingqueue`); and queue rights as Kafka ACL bindings
(:mod:`.kafka_acls`, :mod:`.kafka_acl_admin`).

May import: the foundation modules, :mod:`facade.model`, :mod:`facade.security`,
:mod:`facade.directory` and :mod:`facade.kafka`.
"""
