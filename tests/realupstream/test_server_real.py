"""The whole chain with real parts only: the real third-party Cursor client (oh-my-pi, HTTP/2)
-> our server (configured with the README's local-server example) -> llama-server with a real
model. The README promises that configuration runs; this is where it does."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.conftest import drive
from tests.realupstream.conftest import LlamaServer
from tests.support.live import REPO, server_process

README = (REPO / "README.md").read_text()


def local_block() -> str:
    blocks = re.findall(r"```toml\n(.*?)```", README, flags=re.S)
    (block,) = [b for b in blocks if "127.0.0.1:8080" in b]
    return block


def test_readme_local_config_answers_a_real_client(
    llama_server_8k: LlamaServer, realclient: Path, tmp_path: Path
) -> None:
    # The agent's fixed part (system prompt and Cursor's tools) is about 4,300 real tokens:
    # more than a 4,096-token llama-server holds, so this one has 8,192 (the README's example
    # says 32,768; the model behind it must really have the window it is configured with).
    llama_server = llama_server_8k
    block = local_block().replace("http://127.0.0.1:8080/v1", llama_server.v1_url)
    # The tiny model samples at llama-server's default temperature and now and then loops until
    # the README's 2048-token cap, which on a loaded 2-core machine outlasted the client's
    # timeout; a shorter cap keeps the answer (and the test) bounded. Nothing else changes.
    assert "max_output_tokens = 2048" in block
    block = block.replace("max_output_tokens = 2048", "max_output_tokens = 256")
    config = f'[server]\ndatabase = "{tmp_path / "db"}"\n' + block
    with server_process(config, tmp_path) as srv:
        r = drive(
            realclient,
            srv.url,
            "--prompt",
            "Say hello to Bob.",
            "--model",
            "local",
            "--timeout",
            "170",
            timeout=180,
        )
        log = srv.log()
    assert r.returncode == 0, r.stdout + r.stderr + log
    assert r.stdout.strip().endswith("DRIVE OK")
    text = "".join(line for line in r.stdout.splitlines() if line.startswith("[event] text_delta"))
    assert text, r.stdout
