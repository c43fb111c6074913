"""Whether an address is this machine: the one rule kmq decides locality by.

kmq treats a peer as local when its address is a loopback address, in any of its spellings:
``localhost``, IPv4 ``127.0.0.0/8``, IPv6 ``::1``, and the IPv4-mapped IPv6 form of an IPv4
loopback address (``::ffff:127.0.0.1``), which reaches the same loopback interface.
Python's :mod:`ipaddress` does not count the mapped form as loopback before 3.13, so every
locality decision goes through :func:`is_loopback_host` rather than asking :mod:`ipaddress`
directly. Host names other than ``localhost`` are not resolved: a name is local only by being
``localhost``, so what counts as local never depends on DNS.

Two decisions use it: the local development mode (:func:`facade.security.principal.is_development_mode`,
every Kafka bootstrap server on loopback, where a declared principal is accepted) and the
``DIRECT=TCP:<address>`` format names that name this queue manager
(:meth:`facade.manager.QueueManager.resolve`).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback_host", "is_loopback_server"]


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface.

    Args:
        host (str): a host name or an IPv4 or IPv6 address, optionally in brackets
            (``[::1]``); case and surrounding spaces are ignored.

    Returns:
        bool: True for ``localhost``, an IPv4 or IPv6 loopback address, or an IPv4-mapped
        IPv6 address whose IPv4 address is loopback (``::ffff:127.0.0.1``); False for every
        other name or address (names are not resolved).
    """
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text == "localhost":
        return True
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_server(server: str) -> bool:
    """Whether a ``host[:port]`` server address (one Kafka ``bootstrap.servers`` element) is
    on loopback (:func:`is_loopback_host`).

    Args:
        server (str): ``host:port``, ``[ipv6]:port``, or a host alone (an IPv6 address alone
            is read as the whole address).

    Returns:
        bool: True when its host is a loopback name or address.
    """
    text = server.strip()
    if text.startswith("["):
        return is_loopback_host(text[:text.find("]") + 1] if "]" in text else text)
    if text.count(":") > 1:  # a bare IPv6 address; with a port it would need brackets
        return is_loopback_host(text)
    return is_loopback_host(text.rsplit(":", 1)[0] if ":" in text else text)
