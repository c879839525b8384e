"""The models a server offers, resolved against their providers: plain values the runtime, the
dialect and observability read, built once by the configuration loader."""

from __future__ import annotations

import math

import msgspec

from .settings import ModelSettings, ProviderSettings
from .types import Usage


def prompt_tokens(usage: Usage) -> int:
    return usage.input + usage.cache_read + usage.cache_write


class Prices(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """USD per million tokens. A call whose prompt (input, cache reads and cache writes) is
    over `long_context_tokens` pays `long_context`'s prices for all of its tokens instead
    (Anthropic's and Gemini's tier above 200k), when there is one."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    long_context_tokens: int = 0
    long_context: Prices | None = None

    def cost(self, usage: Usage) -> float:
        tier = self.long_context
        if tier is not None and prompt_tokens(usage) > self.long_context_tokens:
            return tier.cost(usage)
        return (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read
            + usage.cache_write * self.cache_write
        ) / 1_000_000


_prices_decoder = msgspec.json.Decoder(Prices)


def encode_prices(prices: Prices | None) -> str | None:
    """The prices a call is made at, as stored with it (`llm_calls.prices`); None: unpriced."""
    return None if prices is None else msgspec.json.encode(prices).decode()


def decode_prices(text: str | None) -> Prices | None:
    """The prices stored with a call; None for an unpriced call (or one stored before 0013)."""
    return None if not text else _prices_decoder.decode(text)


def call_cost(prices: str | None, usage: Usage) -> float | None:
    """A call's one cost: its usage at the prices stored with it when it was made (`prices`,
    encode_prices). Computed once, when the usage is known, and stored with the call; every
    surface (dashboard, runs, /metrics, `token list`, budgets) sums the stored values, so a
    price change never re-prices a call and an unpriced call (None) stays unpriced."""
    found = decode_prices(prices)
    return None if found is None else found.cost(usage)


def usd(amount: float) -> str:
    """Dollars as an operator reads them: cents at least, and three significant digits for
    what a cent would round away ($0.000123, not $0.00); $0.02, $1.20, $123.46."""
    if amount == 0 or not math.isfinite(amount):
        return "$0.00" if amount == 0 else f"${amount}"
    magnitude = math.floor(math.log10(abs(amount)))
    places = min(12, max(2, 2 - magnitude))
    text = f"{amount:.{places}f}"
    if places > 2:
        text = text.rstrip("0")
        if len(text.partition(".")[2]) < 2:
            text = f"{amount:.2f}"
    return f"-${text[1:]}" if text.startswith("-") else f"${text}"


# What the thinking picker offers a reasoning model whose table names no `efforts`.
DEFAULT_EFFORTS = ("low", "medium", "high")


def picker_efforts(reasoning: bool, efforts: list[str] | None) -> tuple[str, ...]:
    """A model's `efforts` (config order, repeats dropped), else the default for a reasoning
    model; none for another."""
    if efforts is not None:
        return tuple(dict.fromkeys(efforts))
    return DEFAULT_EFFORTS if reasoning else ()


class Model(msgspec.Struct, frozen=True):
    """One model as clients see it, resolved against its provider."""

    id: str
    display_name: str
    provider: ProviderSettings
    settings: ModelSettings
    context_window: int
    prices: Prices | None
    aliases: tuple[str, ...] = ()  # other names clients may ask for (llm/model_names.py)
    vision: bool = False  # the model reads images (AvailableModels.supports_images)
    # The model id that describes pasted images for this one when it has no vision (its
    # description stands in for the image: loop/images.py); None: a note stands in.
    vision_model: str | None = None
    # The reasoning efforts the IDE's thinking picker offers for it (AvailableModels
    # parameter_definitions); a run may ask for one of them (requested_model parameters).
    efforts: tuple[str, ...] = ()
    # The model ids tried in order when a call to this model fails before its first output
    # (after its retries); resolved from ids or aliases by the configuration loader. Flat: a
    # fallback's own fallbacks are not followed.
    fallbacks: tuple[str, ...] = ()
    fallback_vision: tuple[bool, ...] = ()  # whether each of `fallbacks` reads images
    compaction_threshold: float = 0.9  # share of the window that starts a compaction
    compaction_model: str | None = None  # the model id that writes summaries; None: this one
    # Where `prices` and `context_window` came from ("config", "catalogue", "local": zero on
    # loopback, "default", "": none) and the catalogue entry matched ("provider/model (source)",
    # "" for none), for `cursor-byok models` (model_defaults.py).
    prices_source: str = "config"
    context_source: str = "config"
    catalogue: str = ""
    catalogue_note: str = ""

    @property
    def takes_images(self) -> bool:
        """Whether the IDE may send it pasted images: it reads them, or its vision_model
        describes them for it (AvailableModels.supports_images)."""
        return self.vision or self.vision_model is not None
