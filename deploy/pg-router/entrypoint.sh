#!/bin/sh
# HAProxy runs its checks with an empty environment, so the credentials they log in with
# go into a connection service file that only the haproxy user can read:
#   PG_ROUTER_USER, PG_ROUTER_PASSWORD, PG_ROUTER_DATABASE
set -eu
umask 077
cat > /var/lib/pg-router/pg_service.conf <<CONF
[writable]
user=$PG_ROUTER_USER
password=$PG_ROUTER_PASSWORD
dbname=$PG_ROUTER_DATABASE
connect_timeout=2
CONF
exec haproxy -W -db -f /usr/local/etc/haproxy/haproxy.cfg
