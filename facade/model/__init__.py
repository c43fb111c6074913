"""The MSMQ model: what a message and a queue name are, and how they are written to Kafka.

Format names and path names (:mod:`.formatnames`), the message and its properties
(:mod:`.message`, :mod:`.propertyspec`), the message timers time-to-reach-queue and
time-to-be-received (:mod:`.timers`), the Avro envelope a message travels in (:mod:`.avro`,
:mod:`.envelope`), the receipt records that remove a message from a queue (:mod:`.receipts`),
and the Kafka topics a queue is made of, with their settings and size limits (:mod:`.topics`,
:mod:`.topicsettings`).

Pure Python, no network. May import: the foundation modules at ``facade/``'s top (errors,
arguments, config ...) and nothing else of kmq.
"""
