"""The receives of an opened queue that a Kafka share group arbitrates.

A queue created with ``arbitration="share"`` has no receipts log: a share group decides who
gets each message (:mod:`facade.queues.sharequeue`, whose :class:`~facade.queues.sharequeue.ShareReceiver`
is the share consumer). This module is what the queue handle does with it: open the share
consumer at the first receive, refuse what a share group cannot do (a transactional receive),
and settle a peek-lock by its ``share:`` token (the broker's acquisition lock) rather than by
a LOCK receipt.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from facade.errors import InvalidParameter, LockLost
from facade.model.message import Message
from facade.queues.destination import incarnation_guard
from facade.queues.peeklock import LockedMessage, Settles, unlocked
from facade.queues.sharequeue import ShareReceiver
from facade.timeouts import DEFAULT_LEASE

if TYPE_CHECKING:
    from facade.queues.openedqueue import OpenedQueue

__all__ = ["ShareReceives"]


class ShareReceives:
    """Receive, complete and abandon on a share-arbitrated queue.

    Args:
        opened (OpenedQueue): the queue.
        settler (Settles): the handle; a :class:`~facade.queues.peeklock.LockedMessage` settles
            through it.
    """

    def __init__(self, opened: OpenedQueue, settler: Settles):
        self._opened = opened
        self._settler = settler
        #: The share consumer (made at the first receive).
        self._receiver: ShareReceiver | None = None

    def receive(self, timeout: float | None, lock: bool, lease: float, transaction: object,
                max_messages: int) -> list[Message]:
        """receive / receive_many: ACCEPT and ``commit_sync`` before a message is handed out
        (at most once, never twice); with ``lock``, one message under the broker's
        acquisition lock.

        Raises:
            InvalidParameter: ``transaction`` given (KIP-932 has no transactional
                acknowledgement).
        """
        opened = self._opened
        if transaction is not None:
            raise InvalidParameter(
                f"queue {opened.format_name!r} is arbitrated by a Kafka share group, which has "
                "no transactional acknowledgement: receive without transaction=",
                queue=opened.format_name,
                hint="use a queue created with transactional=True and arbitration='receipts' "
                     "for transactional receives")
        with opened.lock:
            if self._receiver is None:
                destination = opened.single()
                self._receiver = ShareReceiver(
                    opened.manager, destination, opened.subqueue_destination("poison"),
                    opened.protection_level(),
                    guard=incarnation_guard(opened.manager.registry, destination))
            if lock:
                message, token, ends = self._receiver.receive_locked(
                    timeout, None if lease is DEFAULT_LEASE else lease)
                return [LockedMessage.adopt(
                    message, token, dt.datetime.fromtimestamp(ends, dt.timezone.utc),
                    self._settler)]
            return self._receiver.receive_many(max_messages, timeout)

    def complete(self, message: Message) -> None:
        """The journal copy, ACCEPT and ``commit_sync``, then ACK_RECEIVE.

        Raises:
            InvalidParameter: not a message of a share-arbitrated queue's peek-lock.
            LockLost: the acquisition lock lapsed, or the handle left the group.
        """
        with self._opened.lock:
            self._receiver_of(message).complete(self._token(message), unlocked(message), message)

    def abandon(self, message: Message) -> bool:
        """A RELEASE (the message's delivery count goes up by one).

        Returns:
            bool: True if this call released it, False if its lock had been settled already.
        """
        with self._opened.lock:
            return self._receiver_of(message).abandon(self._token(message), message)

    def close(self) -> None:
        """Close the share consumer, if one was opened (it leaves the group)."""
        receiver, self._receiver = self._receiver, None
        if receiver is not None:
            receiver.close()

    def _token(self, message: Message) -> str:
        token = getattr(message, "lock_token", None)
        if not isinstance(token, str) or not token.startswith("share:") \
                or message.lookup_id is None:
            raise InvalidParameter("this message was not received with receive(lock=True) "
                                   "from a share-arbitrated queue: it has no peek-lock here",
                                   queue=self._opened.format_name,
                                   hint="pass the message object that receive(lock=True) "
                                        "returned")
        return token

    def _receiver_of(self, message: Message) -> ShareReceiver:
        if self._receiver is None:
            raise LockLost(f"lookup id {message.lookup_id} of {self._opened.format_name!r} is "
                           "not locked by this handle (closed since)",
                           lookup_id=message.lookup_id, queue=self._opened.format_name)
        return self._receiver
