"""MSMQ security as pure functions: who the caller is and what a message's protection is.

Security descriptors and access rights (:mod:`.acl`), the principal a queue manager acts for
(:mod:`.principal`), which addresses are this machine (:mod:`.locality`), message signatures
and body encryption over ``cryptography`` (:mod:`.signing`, :mod:`.encryption`), and the key and
certificate files under ``KMQ_HOME`` (:mod:`.certificates`).

The checks that apply these to a queue (access checks, the queue manager's own access list,
protection at send and on arrival) read the queue registry and views, so they live above them
in :mod:`facade.queues`.

No network. May import: the foundation modules and :mod:`facade.model`.
"""
