#!/bin/sh
# Writes pgbouncer.ini from the environment and runs PgBouncer in transaction mode:
#   PGBOUNCER_HOST      the server: one address that leads to the primary (the ha
#                       profile's pg-router). Not a list of servers: PgBouncer keeps to
#                       one until a connection to it fails, then takes the next, a
#                       standby as readily as a primary.
#   PGBOUNCER_DATABASE, PGBOUNCER_USER, PGBOUNCER_PASSWORD
# Server connections are made with synchronous_commit = on and jit = off (the service's
# startup settings cannot pass a pooler) and prepared statements are carried across them.
set -eu
dir=/var/lib/pgbouncer
printf '"%s" "%s"\n' "$PGBOUNCER_USER" "$PGBOUNCER_PASSWORD" > "$dir/users.txt"
cat > "$dir/pgbouncer.ini" <<INI
[databases]
$PGBOUNCER_DATABASE = host=$PGBOUNCER_HOST port=5432 dbname=$PGBOUNCER_DATABASE connect_query='SET synchronous_commit = on; SET jit = off'

[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
auth_type = scram-sha-256
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
max_prepared_statements = 200
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
# While no server takes writes (a failover), a statement waits this long for one, then
# fails (08P01: the service answers 503); the default, 120 s, outlasts any HTTP client.
query_wait_timeout = 10
INI
exec /opt/pgbouncer/bin/pgbouncer "$dir/pgbouncer.ini"
