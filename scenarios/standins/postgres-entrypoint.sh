#!/bin/sh
# The stand-in postgres image's entrypoint: on the first start (an empty PGDATA) make the cluster with
# POSTGRES_USER as its superuser and POSTGRES_PASSWORD as its password, accept password logins from the network
# (scram-sha-256), in UTF8 as that image makes it; create POSTGRES_DB; then run the command (`postgres ...`) as the postgres user.
set -eu
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    pwfile=$(mktemp)
    printf '%s' "$POSTGRES_PASSWORD" > "$pwfile"
    chown postgres "$pwfile"
    as_postgres initdb -D "$PGDATA" -U "$user" --encoding=UTF8 --locale=C.UTF-8 --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\n" >> "$PGDATA/postgresql.conf"
    as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$db" != "postgres" ]; then
        as_postgres createdb -U "$user" "$db"
    fi
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
if [ "${1:-}" = "postgres" ]; then
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
fi
exec "$@"
