#!/bin/sh
# Writes pgbouncer.ini from the environment and runs PgBouncer in transaction mode:
#   PGBOUNCER_HOSTS     the servers, in order (a standby after its primary): the same
#                       one is used until a connection to it fails, then the next
#   PGBOUNCER_DATABASE, PGBOUNCER_USER, PGBOUNCER_PASSWORD
# Server connections are made with synchronous_commit = on (the service's startup
# settings cannot pass a pooler) and prepared statements are carried across them.
set -eu
dir=/var/lib/pgbouncer
printf '"%s" "%s"\n' "$PGBOUNCER_USER" "$PGBOUNCER_PASSWORD" > "$dir/users.txt"
cat > "$dir/pgbouncer.ini" <<INI
[databases]
$PGBOUNCER_DATABASE = host=$PGBOUNCER_HOSTS port=5432 dbname=$PGBOUNCER_DATABASE load_balance_hosts=disable connect_query='SET synchronous_commit = on; SET jit = off'

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
INI
exec /opt/pgbouncer/bin/pgbouncer "$dir/pgbouncer.ini"
