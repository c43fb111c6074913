#!/usr/bin/env bash
# Installs Debian's slapd and ldap-utils when missing. The package's own service start is
# irrelevant: kmq's tests run their own throwaway slapd on a loopback port.
set -euo pipefail
if command -v slapd >/dev/null 2>&1 || [ -x /usr/sbin/slapd ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "slapd is missing and we are not root: install slapd and ldap-utils" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq slapd ldap-utils >/dev/null
