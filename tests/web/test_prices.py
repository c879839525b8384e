"""What the server's own work costs (web/prices.py), from the configuration: an image at
`[image_generation] price_per_image`, a search at the price of the backend that answered it,
reserved beforehand at the dearest backend the search may fall back to; a failed job costs
nothing; a price that is no number of dollars is refused with its key."""

from __future__ import annotations

import pytest

from cursor_byok.app import job_prices
from cursor_byok.config import ConfigError, parse_config
from cursor_byok.web.prices import JobCharge
from cursor_byok.web.types import (
    ImageJob,
    ImageMade,
    JobFailed,
    SearchHit,
    SearchResults,
    WebSearchJob,
)

CONFIG = """
[providers.p]
api = "openai-chat"
base_url = "http://127.0.0.1:9/v1"

[providers.claude]
api = "anthropic"
base_url = "http://127.0.0.1:9"

[models.a]
provider = "p"
web_search = ["own"]

[models.b]
provider = "p"

[web_search]
backends = ["searx", "claude-search", "brave"]

[web_search.backend.searx]
kind = "searxng"
url = "http://127.0.0.1:8888/"

[web_search.backend.claude-search]
kind = "provider"
provider = "claude"
model = "claude-sonnet-4-5"
price_per_search = {search}

[web_search.backend.brave]
kind = "brave"
api_key_env = "BRAVE_API_KEY"
price_per_search = 0.005

[web_search.backend.own]
kind = "searxng"
url = "http://127.0.0.1:8889/"

[image_generation]
provider = "p"
model = "img-1"
price_per_image = {image}
"""


def config(search: str = "0.01", image: str = "0.04"):  # type: ignore[no-untyped-def]
    return parse_config(CONFIG.format(search=search, image=image), env={"BRAVE_API_KEY": "k" * 20})


def test_images_and_searches_are_priced_from_the_configuration() -> None:
    prices = job_prices(config())
    image = ImageJob(description="a fox")
    assert prices.charge(image) == JobCharge("p", "img-1", "image", 0.04)
    assert prices.cost(image, ImageMade(data=b"png", mime_type="image/png")) == 0.04
    assert prices.cost(image, JobFailed(message="no")) == 0.0
    search = WebSearchJob(query="q", model="b")  # the server-wide order: the dearest bounds it
    charge = prices.charge(search)
    assert charge is not None and charge.bound_usd == 0.01 and charge.api == "search"
    hit = (SearchHit(title="t", url="https://x.example"),)
    assert prices.cost(search, SearchResults(hits=hit, backend="claude-search")) == 0.01
    assert prices.cost(search, SearchResults(hits=hit, backend="brave")) == 0.005
    assert prices.cost(search, SearchResults(hits=hit, backend="searx")) == 0.0
    assert prices.charge(WebSearchJob(query="q", model="a")) is None  # its own free backend


def test_a_price_that_is_no_number_of_dollars_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        config(search="-1", image="1e9")
    text = str(err.value)
    assert "web_search.backend.claude-search.price_per_search must be a number of dollars" in text
    assert "image_generation.price_per_image must be a number of dollars" in text
