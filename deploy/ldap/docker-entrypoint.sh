#!/bin/sh
# Container entry point for deploy/compose.yaml: install Debian's slapd, render kmq's
# slapd.conf.template, load bootstrap.ldif on first start, run slapd in the foreground.
set -eu
SUFFIX="${KMQ_LDAP_SUFFIX:-dc=kmq,dc=local}"
ROOTPW="${KMQ_LDAP_ADMIN_PASSWORD:?set KMQ_LDAP_ADMIN_PASSWORD}"
CONF="${KMQ_LDAP_CONFIG_DIR:-/etc/kmq/ldap}"      # this directory (deploy/ldap)
DATA="${KMQ_LDAP_DATA:-/var/lib/kmq-ldap}"
RUN="${KMQ_LDAP_RUN:-/run/slapd}"
URLS="${KMQ_LDAP_URLS:-ldap://0.0.0.0:389/}"
if ! command -v slapd >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slapd ldap-utils >/dev/null
fi
mkdir -p "$DATA/db" "$RUN"
sed -e "s|{schema_dir}|/etc/ldap/schema|g" -e "s|{kmq_schema}|$CONF/kmq.schema|g" \
    -e "s|{pidfile}|$RUN/slapd.pid|g" -e "s|{directory}|$DATA/db|g" \
    -e "s|{suffix}|$SUFFIX|g" -e "s|{rootdn}|cn=admin,$SUFFIX|g" -e "s|{rootpw}|$ROOTPW|g" \
    "$CONF/slapd.conf.template" > "$RUN/slapd.conf"
slaptest -u -f "$RUN/slapd.conf"
if [ ! -e "$DATA/.bootstrapped" ]; then
    sed "s|dc=kmq,dc=local|$SUFFIX|g" "$CONF/bootstrap.ldif" | slapadd -f "$RUN/slapd.conf"
    touch "$DATA/.bootstrapped"
fi
exec slapd -d 0 -h "$URLS" -f "$RUN/slapd.conf"
