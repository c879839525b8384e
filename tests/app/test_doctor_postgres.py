"""`cursor-byok doctor` with a PostgreSQL database: the connection and the schema version."""

from __future__ import annotations

import psycopg

from cursor_byok.doctor import check_database
from cursor_byok.launch import free_port
from cursor_byok.store.migrate import latest_version, load_migrations
from tests.support.postgres import Cluster


async def test_doctor_reports_the_schema_version_of_a_postgresql_database(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.create_database("doctor_ok")
    latest = latest_version(load_migrations("postgresql"))
    check = await check_database(url)
    assert check.status == "OK", check
    assert f"PostgreSQL, schema v{latest} (latest {latest})" in check.detail
    with psycopg.connect(url) as conn:  # it migrated the empty database, as serve would
        row = conn.execute("SELECT version FROM cursor_byok_schema").fetchone()
    assert row == (latest,)


async def test_doctor_fails_on_a_newer_schema_and_an_unreachable_server(
    pg_cluster: Cluster,
) -> None:
    url = pg_cluster.create_database("doctor_newer")
    assert (await check_database(url)).status == "OK"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE cursor_byok_schema SET version = 99")
    newer = await check_database(url)
    assert newer.status == "FAIL" and "schema version 99 is newer" in newer.detail, newer

    secret = "s3cret-pass"
    gone = f"postgresql://someone:{secret}@127.0.0.1:{free_port()}/nothing"
    down = await check_database(gone)
    assert down.status == "FAIL" and "cannot connect to the database server" in down.detail
    assert secret not in down.detail and secret not in down.next_step, down
    assert "postgresql://someone@127.0.0.1" in down.detail
