"""kmq's directory of MSMQ public objects (Active Directory's role in MSMQ).

Queue managers, public queues, queue aliases and distribution lists are LDAP entries with AD's
class and attribute names (see :mod:`facade.directory.layout` and ``deploy/ldap/``), kept either in
a real LDAP server or in the embedded JSON-file store (:mod:`facade.directory.embedded`).

Only this package imports ldap3. :class:`Directory` is the API; the stores underneath are
:class:`EmbeddedDirectoryStore` (the default) and :class:`LdapDirectoryStore` (a real server).

May import: the foundation modules, :mod:`facade.model` and :mod:`facade.security`.
"""

from __future__ import annotations

from facade.directory.client import Directory, DirectoryStore, Recipient, open_store
from facade.directory.embedded import EmbeddedDirectoryStore, embedded_schema, parse_slapd_schema
from facade.directory.ldap import LdapDirectoryStore
from facade.directory.objects import (
    DirectoryObject,
    DistributionListEntry,
    GroupScope,
    PublicQueueEntry,
    QueueAliasEntry,
    QueueManagerEntry,
)
from facade.directory.patterns import LabelPattern
from facade.directory.layout import (
    ALIASES_OU,
    COMPUTERS_OU,
    DEFAULT_BASE_DN,
    DISTRIBUTION_LISTS_OU,
    QUEUE_MANAGER_CN,
    USERS_OU,
    Attr,
    LdifEntry,
    ObjectClass,
    alias_dn,
    aliases_dn,
    bootstrap_entries,
    bootstrap_ldif_path,
    computer_dn,
    computers_dn,
    deploy_file,
    distribution_list_dn,
    distribution_lists_dn,
    dn_key,
    is_descendant,
    normalize_dn,
    parent_dn,
    parse_ldif,
    public_queue_dn,
    queue_manager_dn,
    rdn_value,
    rebase_dn,
    same_dn,
    schema_path,
    suffix_entry,
    users_dn,
    validate_base_dn,
)

__all__ = [
    "Directory",
    "DirectoryObject",
    "DirectoryStore",
    "DistributionListEntry",
    "GroupScope",
    "LabelPattern",
    "LdapDirectoryStore",
    "PublicQueueEntry",
    "QueueAliasEntry",
    "QueueManagerEntry",
    "Recipient",
    "open_store",
    "ALIASES_OU",
    "COMPUTERS_OU",
    "DEFAULT_BASE_DN",
    "DISTRIBUTION_LISTS_OU",
    "QUEUE_MANAGER_CN",
    "USERS_OU",
    "Attr",
    "EmbeddedDirectoryStore",
    "LdifEntry",
    "ObjectClass",
    "alias_dn",
    "aliases_dn",
    "bootstrap_entries",
    "bootstrap_ldif_path",
    "computer_dn",
    "computers_dn",
    "deploy_file",
    "distribution_list_dn",
    "distribution_lists_dn",
    "dn_key",
    "embedded_schema",
    "is_descendant",
    "normalize_dn",
    "parent_dn",
    "parse_ldif",
    "parse_slapd_schema",
    "public_queue_dn",
    "queue_manager_dn",
    "rdn_value",
    "rebase_dn",
    "same_dn",
    "schema_path",
    "suffix_entry",
    "users_dn",
    "validate_base_dn",
]
