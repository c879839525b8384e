"""`cursor-byok doctor` against a real fake upstream over loopback and real database files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cursor_byok import cli
from cursor_byok.doctor import Check, run_checks
from cursor_byok.store.migrate import load_migrations
from cursor_byok.store.sqlite import SQLiteStore
from tests.support.search_fakes import BRAVE_KEY, PATHS, TAVILY_KEY, SearchFakes
from tests.support.upstream import Received, Reply, fake_upstream

GOOD_KEY = "sk-good-PLANTED-aaaaaaaaaaaaaaaa"
BAD_KEY = "sk-bad-PLANTED-bbbbbbbbbbbbbbbbbb"
NOMODEL_KEY = "sk-nomodel-PLANTED-cccccccccccc"
SLOW_KEY = "sk-slow-PLANTED-dddddddddddddddd"
KEYS = (GOOD_KEY, BAD_KEY, NOMODEL_KEY, SLOW_KEY)


def chunk(delta: dict[str, object], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


OK_STREAM = [
    chunk({"role": "assistant", "content": "OK"}),
    chunk({}, "stop"),
    json.dumps(
        {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 1}}
    ),
    "[DONE]",
]


def by_key(request: Received) -> Reply:
    auth = request.headers.get("authorization", "")
    if auth == f"Bearer {GOOD_KEY}":
        return Reply.events(OK_STREAM)
    if auth == f"Bearer {BAD_KEY}":
        # Real providers echo part of the key; the whole one must still never be printed.
        return Reply.json(
            401,
            json.dumps(
                {
                    "error": {
                        "type": "invalid_request_error",
                        "message": f"Incorrect API key provided: {BAD_KEY}",
                    }
                }
            ),
        )
    if auth == f"Bearer {NOMODEL_KEY}":
        return Reply.json(
            404,
            '{"error":{"message":"The model `nope-1` does not exist","code":"model_not_found"}}',
        )
    return Reply(chunks=[], hang_after=True)  # SLOW_KEY: headers, then nothing


def write_config(tmp_path: Path, base_url: str, database: Path) -> Path:
    cfg = tmp_path / "doctor.toml"
    cfg.write_text(
        f"""
[server]
database = "{database}"

[providers.good]
api = "openai-chat"
base_url = "{base_url}/v1"
api_key_env = "DOCTOR_GOOD_KEY"

[providers.bad]
api = "openai-chat"
base_url = "{base_url}/v1"
api_key_env = "DOCTOR_BAD_KEY"

[providers.nomodel]
api = "openai-chat"
base_url = "{base_url}/v1"
api_key = "{NOMODEL_KEY}"

[providers.slow]
api = "openai-chat"
base_url = "{base_url}/v1"
api_key_env = "DOCTOR_SLOW_KEY"

[providers.down]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[providers.unused]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[models.ok-model]
provider = "good"
model = "good-1"

[models.second-good]
provider = "good"
model = "good-2"

[models.bad-model]
provider = "bad"
model = "bad-1"

[models.missing]
provider = "nomodel"
model = "nope-1"

[models.slow-model]
provider = "slow"
model = "slow-1"

[models.down-model]
provider = "down"
model = "down-1"
"""
    )
    return cfg


ENV = {"DOCTOR_GOOD_KEY": GOOD_KEY, "DOCTOR_BAD_KEY": BAD_KEY, "DOCTOR_SLOW_KEY": SLOW_KEY}


def rows_by_name(rows: list[Check]) -> dict[str, Check]:
    return {r.name: r for r in rows}


async def test_doctor_providers_against_a_fake_upstream(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    async with await SQLiteStore.open(db):
        pass
    async with fake_upstream() as up:
        up.push(*([by_key] * 4))
        cfg = write_config(tmp_path, up.base_url, db)
        rows = rows_by_name(await run_checks(str(cfg), timeout_s=1.5, env=ENV))
        paths = sorted(r.path for r in up.requests)

    assert rows["config"].status == "OK" and "6 provider(s), 6 model(s)" in rows["config"].detail
    assert rows["database"].status == "OK"
    assert (
        f"schema v{len(load_migrations())}" in rows["database"].detail
        and "integrity ok" in rows["database"].detail
    )

    good = rows["provider good"]
    assert good.status == "OK" and "good-1" in good.detail and "9 in / 1 out" in good.detail
    pings = [p for p in paths if p.startswith("/v1/")]
    assert pings == ["/v1/chat/completions"] * 4  # one request per checked provider
    # The rest: each local model's window probes (llama.cpp, then Ollama), nothing else.
    assert set(paths) - set(pings) <= {"/props", "/api/ps", "/api/show"}

    bad = rows["provider bad"]
    assert bad.status == "FAIL" and "401" in bad.detail
    assert bad.next_step == "check the key in $DOCTOR_BAD_KEY (and that it may use 'bad-1')"

    missing = rows["provider nomodel"]
    assert missing.status == "FAIL" and "404" in missing.detail
    assert "models.missing.model ('nope-1')" in missing.next_step
    assert "providers.nomodel.base_url" in missing.next_step

    slow = rows["provider slow"]
    assert slow.status == "FAIL" and "within 1.5 s" in slow.detail
    assert "--timeout" in slow.next_step

    down = rows["provider down"]
    assert down.status == "FAIL" and "no connection" in down.detail
    assert down.next_step == "is the server at http://127.0.0.1:9/v1 running and reachable?"

    assert rows["provider unused"].status == "WARN"
    for row in rows.values():
        for key in KEYS:
            assert key not in row.detail and key not in row.next_step


async def test_doctor_names_a_socks_proxy_that_provider_calls_cannot_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALL_PROXY", "socks5h://127.0.0.1:1080")
    async with fake_upstream() as up:
        up.push(*([by_key] * 4))
        cfg = write_config(tmp_path, up.base_url, tmp_path / "db.sqlite")
        rows = rows_by_name(await run_checks(str(cfg), timeout_s=1.5, env=ENV))
    assert up.requests == []  # not sent direct behind the proxy setting's back
    good = rows["provider good"]
    assert good.status == "FAIL" and "socks5h:// proxy" in good.detail
    assert good.detail.startswith("the proxy cannot be used: good: could not connect: ")
    assert good.next_step == (
        "point HTTPS_PROXY / HTTP_PROXY at an http:// proxy, or unset the SOCKS one"
    )


async def test_doctor_command_prints_a_table_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    async with fake_upstream() as up:
        up.push(*([by_key] * 4))
        cfg = write_config(tmp_path, up.base_url, tmp_path / "new.db")
        argv = ["doctor", "--config", str(cfg), "--timeout", "1"]
        status = await asyncio.to_thread(cli.main, argv)
    out = capsys.readouterr().out
    assert status == 1
    lines = out.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL"]
    assert any(line.startswith("provider good ") and " OK " in line for line in lines)
    assert any(line.startswith("provider bad ") and " FAIL " in line for line in lines)
    # A missing database is not an error: `serve` creates it; doctor does not.
    assert any(line.startswith("database ") and " WARN " in line for line in lines)
    assert not (tmp_path / "new.db").exists()
    assert "4 check(s) failed." in out
    for key in KEYS:
        assert key not in out


async def test_doctor_all_ok_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCTOR_GOOD_KEY", GOOD_KEY)
    async with fake_upstream() as up:
        up.push(by_key)
        cfg = tmp_path / "ok.toml"
        cfg.write_text(
            f'[server]\ndatabase = "{tmp_path / "db"}"\n'
            f'[providers.good]\napi = "openai-chat"\nbase_url = "{up.base_url}"\n'
            'api_key_env = "DOCTOR_GOOD_KEY"\n'
            '[models.m]\nprovider = "good"\n'
        )
        status = await asyncio.to_thread(cli.main, ["doctor", "--config", str(cfg)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "All checks passed." in out
    assert GOOD_KEY not in out
    assert "no [web_search] backend: WebSearch is not offered" in out


async def test_doctor_corrupt_database(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"this is not a sqlite database at all" * 200)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[server]\ndatabase = "{db}"\n')
    rows = rows_by_name(await run_checks(str(cfg), env={}))
    database = rows["database"]
    assert database.status == "FAIL"
    assert "not a usable database" in database.detail
    assert "move" in database.next_step and str(db) in database.next_step
    assert rows["models"].status == "FAIL"  # no models: clients would see an empty list
    assert "[models." in rows["models"].next_step


async def test_doctor_database_override_and_missing_folder(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\n")
    rows = rows_by_name(
        await run_checks(str(cfg), database=str(tmp_path / "no" / "such" / "x.db"), env={})
    )
    assert rows["database"].status == "FAIL" and "does not exist" in rows["database"].detail
    assert "create" in rows["database"].next_step
    (tmp_path / "a-file").write_text("x")  # a parent that is a file is not "missing"
    rows = rows_by_name(
        await run_checks(str(cfg), database=str(tmp_path / "a-file" / "x.db"), env={})
    )
    assert rows["database"].status == "FAIL"
    assert "is a file, not a folder" in rows["database"].detail


async def test_doctor_config_errors_are_clear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[providers.x]\napi = "openai-chat"\napi_key_env = "DOCTOR_UNSET_VAR"\n')
    rows = await run_checks(str(cfg), env={})
    assert rows[0].status == "FAIL"
    assert "DOCTOR_UNSET_VAR is not set" in rows[0].detail
    assert rows[0].next_step.startswith("export DOCTOR_UNSET_VAR=")
    assert {r.status for r in rows[1:]} == {"SKIP"}

    cfg.write_text("[server\nport = 1")
    rows = await run_checks(str(cfg), env={})
    assert rows[0].status == "FAIL" and "not valid TOML" in rows[0].detail

    rows = await run_checks(str(tmp_path / "absent.toml"), env={})
    assert rows[0].status == "FAIL" and "cursor-byok init" in rows[0].next_step

    status = await asyncio.to_thread(cli.main, ["doctor", "--config", str(cfg)])
    assert status == 1
    assert "not valid TOML" in " ".join(capsys.readouterr().out.split())  # may wrap


def test_doctor_address_free_in_use_and_unknown() -> None:
    import socket

    from cursor_byok.doctor import check_listen

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        taken.listen()
        busy = check_listen("127.0.0.1", port)
        assert busy.status == "WARN" and f"127.0.0.1:{port} is in use" in busy.detail
        assert "server.port" in busy.next_step
    free = check_listen("localhost", port)  # released: free again
    assert free.status == "OK" and free.detail == f"localhost:{port} is free"
    unknown = check_listen("no such host.invalid", 8700)
    assert unknown.status == "FAIL" and "not an address of this machine" in unknown.detail


def test_doctor_output_fits_100_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Long names, URLs, paths and error texts wrap under the DETAIL column (issue 13,
    point 13): no line is wider than 100 characters, and nothing is lost but line breaks."""
    from cursor_byok.launch import free_port

    closed = free_port()
    deep = tmp_path / ("a-rather-long-folder-name-for-the-database-" * 3)
    url = f"http://127.0.0.1:{closed}/v1/" + "/".join(["a-long-path-segment"] * 6)
    cfg = tmp_path / "doctor-wide.toml"
    cfg.write_text(
        f'[server]\ndatabase = "{deep / "byok.db"}"\n'
        f'[providers.a-provider-with-a-really-long-name]\napi = "openai-chat"\nbase_url = "{url}"\n'
        '[providers.unused-provider-with-a-long-name-too]\napi = "openai-chat"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
        "[models.a-model-id-that-goes-on-and-on-and-on-for-quite-a-while]\n"
        'provider = "a-provider-with-a-really-long-name"\n'
        'model = "an-upstream-model-name-that-is-also-rather-long-2025-10-01-preview"\n'
    )
    status = cli.main(["doctor", "--config", str(cfg), "--timeout", "2"])
    out = capsys.readouterr().out
    assert status == 1
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100, out
    assert "provider a-provider-with-a-really-long-name" in lines  # a line of its own
    assert any(line.split()[:1] == ["FAIL"] for line in lines)  # its status, below it
    assert url in "".join(line.strip() for line in lines)  # cut, not shortened
    assert "next step: add a model with provider = 'unused-provider-with-a-long-name-too'" in (
        " ".join(out.split())
    )


async def test_doctor_searches_once_with_each_web_search_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCTOR_GOOD_KEY", GOOD_KEY)
    monkeypatch.setenv("DOCTOR_BRAVE_KEY", BRAVE_KEY)
    monkeypatch.setenv("DOCTOR_TAVILY_KEY", "tvly-wrong-PLANTED-eeeeeeeeeeee")
    fakes = await SearchFakes().start()
    try:
        async with fake_upstream() as up:
            up.push(by_key)
            cfg = tmp_path / "search.toml"
            cfg.write_text(
                f'[server]\ndatabase = "{tmp_path / "db"}"\n'
                f'[providers.good]\napi = "openai-chat"\nbase_url = "{up.base_url}"\n'
                'api_key_env = "DOCTOR_GOOD_KEY"\n'
                '[models.m]\nprovider = "good"\nweb_search = ["tav"]\n'
                '[web_search]\nbackends = ["searx", "brave"]\ntimeout_s = 5\n'
                f'[web_search.backend.searx]\nkind = "searxng"\nurl = "{fakes.base_url}"\n'
                '[web_search.backend.brave]\nkind = "brave"\napi_key_env = "DOCTOR_BRAVE_KEY"\n'
                f'url = "{fakes.base_url}{PATHS["brave"]}"\n'
                '[web_search.backend.tav]\nkind = "tavily"\napi_key_env = "DOCTOR_TAVILY_KEY"\n'
                f'url = "{fakes.base_url}{PATHS["tavily"]}"\n'
            )
            rows = await run_checks(str(cfg))
    finally:
        await fakes.stop()
    by_name = {r.name: r for r in rows}
    searx, brave, tav = by_name["search searx"], by_name["search brave"], by_name["search tav"]
    assert searx.status == "OK" and "(1 result(s)); used server-wide" in searx.detail
    assert brave.status == "OK" and brave.detail.endswith("used server-wide")
    assert tav.status == "FAIL"
    assert tav.detail == (
        "search backend 'tav' refused the request (HTTP 401): check its key or settings"
    )
    assert "web_search.backend.tav" in tav.next_step
    # One tiny search each; the keys went in their headers and were never printed.
    assert [r.query for r in fakes.of("searxng")] == [{"q": "cursor-byok", "format": "json"}]
    assert [r.key_ok for r in fakes.of("brave")] == [True]
    assert [r.key_ok for r in fakes.of("tavily")] == [False]
    printed = " ".join(f"{r.detail} {r.next_step}" for r in rows)
    assert BRAVE_KEY not in printed and TAVILY_KEY not in printed and "PLANTED-eee" not in printed


def test_doctor_shows_the_web_tools_settings(tmp_path: Path) -> None:
    from cursor_byok.doctor import check_config

    cfg = tmp_path / "c.toml"
    base = '[providers.img]\napi = "openai-chat"\nbase_url = "http://127.0.0.1:9/v1"\n'
    base += '[models.m]\nprovider = "img"\n'
    cfg.write_text(base)
    _config, rows = check_config(str(cfg), {})
    assert [r.name for r in rows] == ["config", "models"]
    cfg.write_text(
        base + '[web_fetch]\nserver_side = true\n[image_generation]\nprovider = "img"\n'
        'model = "gpt-image-1"\n'
    )
    _config, rows = check_config(str(cfg), {})
    by_name = {r.name: r for r in rows}
    assert by_name["web fetch"].status == "OK"
    assert by_name["web fetch"].detail == (
        "server-side fetch on for clients that cannot fetch: public addresses only, at most "
        "2000000 bytes, 20 s and 5 redirects a page"
    )
    assert by_name["images"].detail == (
        "GenerateImage offered: model gpt-image-1 at http://127.0.0.1:9/v1/images/generations "
        "(provider img, 120 s); not tried, an image costs"
    )
