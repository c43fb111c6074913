"""The queue manager's parts: the queue handle and everything a send or a receive does.

The queue handle ``MessageQueue`` (:mod:`.queue`), which reads like System.Messaging's and
delegates to one object per mechanism: what they share (:mod:`.openedqueue`), the wait loop
(:mod:`.waitloop`), receive claims and peeks (:mod:`.claims`), peek-lock leases
(:mod:`.peeklock`), prefetched batches (:mod:`.prefetch`), what the system does on its own:
expiry, poison, lapsed leases (:mod:`.systemactions`), the send path (:mod:`.sendpath`) and
receives from a share-arbitrated queue (:mod:`.sharereceives`, over :mod:`.sharequeue`'s share
group); cursors (:mod:`.cursor`) and transactions (:mod:`.transaction`); what every send and
every receive does with a message
(:mod:`.sending`, :mod:`.receiving`); the copies to queue topics through the outgoing queue
(:mod:`.transmission`); acknowledgments, dead-letter and journal copies (:mod:`.systemoutputs`);
format-name resolution (:mod:`.resolution`, :mod:`.destination`); and the checks that apply
security to a queue: access rights (:mod:`.authorization`), the queue manager's own access
list (:mod:`.qmsecurity`), signing and encryption at send and on arrival (:mod:`.protection`).

These name the queue manager only through the small protocols of :mod:`.interfaces` and
:mod:`.queuehost` (the manager passes itself), so none imports :mod:`facade.manager`.

May import: the foundation modules, :mod:`facade.model`, :mod:`facade.security`,
:mod:`facade.directory`, :mod:`facade.kafka` and :mod:`facade.state`.
"""
