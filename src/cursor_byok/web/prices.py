"""What the server's own work for a tool call costs: an image made (`[image_generation]
price_per_image`) and a search a backend answered (`[web_search.backend.NAME]
price_per_search`, a provider's own search above all: it is billed per call).

The runtime charges these to the person token of the run the way it charges a model call: it
reserves the most the job can cost before running it (`JobPrices.charge`: the image's price,
or the dearest backend the search may fall back to) and settles to what it did cost
(`JobPrices.cost`: nothing for a job that failed, the price of the backend that answered).
"""

from __future__ import annotations

import msgspec

from .search.settings import WebSearchSettings
from .types import ImageJob, ImageMade, JobOutcome, SearchResults, ServerJob, WebSearchJob

__all__ = ["JobCharge", "JobPrices"]


class JobCharge(msgspec.Struct, frozen=True):
    """A priced job as its charge's record names it: where it ran, and the most it costs."""

    provider: str
    model: str
    api: str  # "image" or "search": what the record is a charge for
    bound_usd: float


class JobPrices:
    def __init__(
        self,
        *,
        image_provider: str = "",
        image_model: str = "",
        price_per_image: float | None = None,
        search: WebSearchSettings | None = None,
    ) -> None:
        self._image = (image_provider, image_model, price_per_image)
        self._search = search or WebSearchSettings()

    def charge(self, job: ServerJob) -> JobCharge | None:
        """The charge `job` makes, before it runs; None: it is free."""
        match job:
            case ImageJob():
                provider, model, price = self._image
                return None if price is None else JobCharge(provider, model, "image", price)
            case WebSearchJob(model=model_id):
                prices = self._search.prices
                priced = [n for n in self._search.order_for(model_id) if n in prices]
                if not priced:
                    return None
                return JobCharge(
                    "web_search", ",".join(priced), "search", max(prices[n] for n in priced)
                )
            case _:
                return None

    def cost(self, job: ServerJob, outcome: JobOutcome) -> float:
        """What `job` cost once it ran: its price when it did its work, else nothing."""
        match outcome:
            case ImageMade() if isinstance(job, ImageJob):
                return self._image[2] or 0.0
            case SearchResults(backend=backend):
                return self._search.prices.get(backend, 0.0)
            case _:
                return 0.0
