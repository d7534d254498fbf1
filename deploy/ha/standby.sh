#!/bin/bash
# The HA profile's standby: on first start, a base backup of pg-primary (retried until it
# answers), written as a standby (-R: standby.signal and primary_conninfo); then
# PostgreSQL in recovery, streaming from it. Its cluster_name is what the primary's
# synchronous_standby_names lists, so every commit on the primary waits for it.
set -euo pipefail
export PGDATA=${PGDATA:-/var/lib/postgresql/data}
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  until PGPASSWORD=$POSTGRES_PASSWORD as_pg pg_basebackup -h "${PRIMARY_HOST:-pg-primary}" \
      -U "$POSTGRES_USER" -D "$PGDATA" -R -X stream; do
    echo "standby: waiting for the primary"
    rm -rf "${PGDATA:?}"/*
    sleep 1
  done
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" "$@"
