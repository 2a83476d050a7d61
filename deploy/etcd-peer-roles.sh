#!/bin/sh
# Gives each metad peer of an etcd registry an etcd user and a role of its own, so that a
# peer's credentials write only its own member key and its own publications, and read the rest
# of the prefix (docs/security.md, "etcd with a role per peer"):
#
#   role metaload-<node>:  read       <prefix>            (every member and every record)
#                          readwrite  <prefix>members/<node>
#                          readwrite  <prefix>models/<node>/   (a prefix: its publications)
#   user <user>:           granted metaload-<node>
#
# Usage: etcd-peer-roles.sh [--prefix /metaload/] NODE=USER[:PASSWORD_FILE] ...
#
#   NODE            the peer's `node:` in its node config.
#   USER            the etcd user it is: its registry_tls certificate's common name (etcd takes
#                   the user from it under --client-cert-auth), or its `registry_auth.user`.
#   PASSWORD_FILE   the user's password (registry_auth.password_file); without it a random one
#                   nobody knows (a certificate user never sends one).
#
# Run it once with etcd's root credentials, before `etcdctl auth enable` (or after, as root);
# for a peer added later, run it for that peer alone. etcdctl is taken from $ETCDCTL (default
# `etcdctl`) and reads its endpoint and credentials from its usual environment
# (ETCDCTL_ENDPOINTS, ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY, ETCDCTL_USER). Then:
#
#   etcdctl user add root && etcdctl user grant-role root root && etcdctl auth enable
#
# Roles are named after the node alone: give clusters that share an etcd distinct node names
# (or run this with ROLE_PREFIX=<cluster> for roles <cluster>-<node>).
set -eu

ETCDCTL=${ETCDCTL:-etcdctl}
ROLE_PREFIX=${ROLE_PREFIX:-metaload}
prefix=/metaload/
if [ "${1:-}" = "--prefix" ]; then
  prefix=$2
  shift 2
fi
case "$prefix" in
  /*/) ;;
  *) echo "etcd-peer-roles.sh: --prefix $prefix must start and end with '/'" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

name_ok() {  # metaload's node names: letters, digits, '-', '_', '.', not starting with '.'
  case "$1" in
    "" | .* | *[!A-Za-z0-9._-]*) return 1 ;;
  esac
}

for peer in "$@"; do
  node=${peer%%=*}
  login=${peer#*=}
  user=${login%%:*}
  password_file=
  [ "$login" = "$user" ] || password_file=${login#*:}
  if [ "$node" = "$peer" ] || ! name_ok "$node" || [ -z "$user" ]; then
    echo "etcd-peer-roles.sh: \"$peer\" is not NODE=USER[:PASSWORD_FILE] with a node name" >&2
    exit 2
  fi
  role="$ROLE_PREFIX-$node"
  "$ETCDCTL" role add "$role"
  "$ETCDCTL" role grant-permission "$role" read --prefix=true "$prefix"
  "$ETCDCTL" role grant-permission "$role" readwrite "${prefix}members/$node"
  "$ETCDCTL" role grant-permission "$role" readwrite --prefix=true "${prefix}models/$node/"
  if [ -n "$password_file" ]; then
    "$ETCDCTL" user add "$user" --interactive=false < "$password_file"
  else
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | "$ETCDCTL" user add "$user" --interactive=false
  fi
  "$ETCDCTL" user grant-role "$user" "$role"
done
