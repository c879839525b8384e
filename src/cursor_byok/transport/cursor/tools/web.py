"""WebFetch and GenerateImage: an approval query first, then the work (reference §2.15, §2.16).

WebFetch asks `web_fetch_request_query`; once approved, the client fetches the page (exec
`fetch_args`). A client that cannot fetch (it throws, or answers "Not implemented" as the
third-party client does) hands the page to the server (`PageFetchJob`), which fetches it only
when the operator switched that on ([web_fetch] server_side) and otherwise says why not. The
page reaches the model as text (web/page_text.py), bounded by `page_text_chars`; an HTML page
the client fetched is converted by the server's worker processes (`PageTextJob`,
web/convert.py), never on the event loop.

GenerateImage asks `generate_image_request_query`; once approved, the server makes the image
(`ImageJob`, web/images.py) and the client writes it into the workspace (exec `write_args`
with `file_bytes` [U]: the reference does not say whether the IDE needs the file or only the
card's `image_data`, so we do both). The model reads where the image was written.
"""

from __future__ import annotations

import base64
import re
from typing import Any, ClassVar
from urllib.parse import urlsplit

from ....web.page_text import bounded_text, is_html, is_text, page_text
from ....web.types import (
    ImageJob,
    ImageMade,
    JobFailed,
    JobOutcome,
    PageFetched,
    PageFetchJob,
    PageTextJob,
)
from ..proto import agent_pb2
from . import args as a
from .files import write_failure
from .images import sniff_image
from .machine import Finished, Handlers, Phase, Step
from .queries import QueryMachine

__all__ = ["ASPECT_RATIOS", "GenerateImageMachine", "WebFetchMachine", "image_file_name"]

# What the client's "I cannot fetch" looks like: the third-party client's answer to an exec it
# does not implement.
_CANNOT_FETCH = re.compile(r"not\s+implemented|unsupported|unknown exec", re.IGNORECASE)


class WebFetchMachine(QueryMachine):
    CARD = "web_fetch_tool_call"
    QUERY_FIELD = "web_fetch_request_query"
    RESPONSE_FIELD = "web_fetch_request_response"
    REQUIRED = ("url",)
    WAITS_ON_PERSON = True  # the approval

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._converting = False  # the server job out is the text of the client's page

    @property
    def url(self) -> str:
        return a.str_or_empty(self.args, "url").strip()

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return f"Error: WebFetch needs an http:// or https:// URL, not {self.url!r}."
        return None

    def _args(self) -> agent_pb2.WebFetchArgs:
        return agent_pb2.WebFetchArgs(url=self.url, tool_call_id=self.tool_call_id)

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.web_fetch_tool_call.args.CopyFrom(self._args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.web_fetch_tool_call.result.error.url = self.url
        tc.web_fetch_tool_call.result.error.error = text

    def _query(self) -> agent_pb2.WebFetchRequestQuery:
        return agent_pb2.WebFetchRequestQuery(args=self._args())

    def _on_answer(self, response: agent_pb2.WebFetchRequestResponse, now_ms: int) -> Step:
        match response.WhichOneof("result"):
            case "approved":
                fetch = agent_pb2.FetchArgs(url=self.url, tool_call_id=self.tool_call_id)
                return self._next_exec(Phase.APPROVED, "fetch_args", fetch)
            case "rejected":
                reason = response.rejected.reason or "no reason given"
                tc = self._card()
                tc.web_fetch_tool_call.result.rejected.reason = reason
                return self._finish(
                    f"The user declined fetching {self.url}: {reason}", tc, now_ms, is_error=True
                )
            case _:
                return self._finish_error(
                    "Error: the client answered the WebFetch request with neither an approval "
                    "nor a rejection; the page was not fetched.",
                    now_ms,
                )

    def _on_fetch(self, result: agent_pb2.FetchResult, now_ms: int) -> Step:
        match result.WhichOneof("result"):
            case "success":
                s = result.success
                url = s.url or self.url
                if is_text(s.content_type) and is_html(s.content, s.content_type):
                    self._converting = True
                    return self._run_job(
                        PageTextJob(
                            url=url,
                            status=s.status_code,
                            content_type=s.content_type,
                            content=s.content,
                        )
                    )
                return self._page(url, s.status_code, s.content_type, s.content, now_ms)
            case "error":
                error = result.error.error or "no reason given"
                if _CANNOT_FETCH.search(error):
                    return self._run_job(PageFetchJob(url=self.url))
                return self._finish_error(
                    f"Error: the client could not fetch {self.url}: {error}", now_ms
                )
            case _:
                return self._finish_error(
                    f"Error: the client sent an empty fetch result for {self.url}.", now_ms
                )

    def _on_throw(self, error: str, code: str, now_ms: int) -> Step:
        if self.phase is Phase.APPROVED:
            # The client has no fetch of its own: the server may fetch the page instead.
            return self._run_job(PageFetchJob(url=self.url))
        return super()._on_throw(error, code, now_ms)

    def _on_job_done(self, outcome: JobOutcome, now_ms: int) -> Step:
        match outcome:
            case PageFetched(url=url, status=status, content_type=content_type, text=text):
                return self._page(url, status, content_type, text, now_ms, cleaned=True)
            case JobFailed(message=message) if self._converting:
                return self._finish_error(
                    f"Error: {self.url} was fetched, but its text could not be read: {message}",
                    now_ms,
                )
            case JobFailed(message=message):
                return self._finish_error(
                    f"Error: the client cannot fetch web pages, and the server did not fetch "
                    f"{self.url}: {message}",
                    now_ms,
                )
            case _:
                return self._finish_error(
                    "Error: the server answered the page fetch with something else.", now_ms
                )

    def _page(
        self,
        url: str,
        status: int,
        content_type: str,
        content: str,
        now_ms: int,
        *,
        cleaned: bool = False,
    ) -> Finished:
        kind = content_type.split(";", 1)[0].strip() or "unknown type"
        if cleaned:
            text = content
        elif is_text(content_type):
            text = page_text(content, content_type)
        else:
            text = f"(The page is {kind}, not text: its content is not shown.)"
        text, _cut = bounded_text(text, self.settings.page_text_chars)
        tc = self._card()
        success = tc.web_fetch_tool_call.result.success
        success.url = url
        success.markdown = text
        head = f"Fetched {url} (HTTP {status}, {kind})." if status else f"Fetched {url} ({kind})."
        failed = status >= 400
        if failed:
            head += f" The server answered with an error status {status}."
        body = text if text else "(the page has no text)"
        return self._finish(f"{head}\n\n{body}", tc, now_ms, is_error=failed)

    HANDLERS: ClassVar[Handlers] = {Phase.APPROVED: {"fetch_result": _on_fetch}}


# The aspect ratios the tool offers (reference §2.16).
ASPECT_RATIOS = ("1:1", "4:3", "3:4", "16:9", "9:16")
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_EXTENSIONS = {"PNG": ".png", "JPEG": ".jpg", "GIF": ".gif", "WEBP": ".webp"}


def image_file_name(filename: str, description: str) -> str:
    """A bare, safe file name for the image: the model's `filename` without folders or odd
    characters, else one made from the description; `.png` when it has no extension."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].strip()
    name = _NAME_BAD.sub("-", base).strip(".-")
    if not name:
        words = _NAME_BAD.sub("-", description.lower()).strip(".-")[:40].strip(".-")
        name = words or "image"
    if "." not in name:
        name += ".png"
    return name


class GenerateImageMachine(QueryMachine):
    CARD = "generate_image_tool_call"
    QUERY_FIELD = "generate_image_request_query"
    RESPONSE_FIELD = "generate_image_request_response"
    REQUIRED = ("description",)
    WAITS_ON_PERSON = True  # the approval

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._description = a.str_or_empty(self.args, "description")
        self._image: ImageMade | None = None

    @property
    def file_path(self) -> str:
        """Where the image goes: the workspace's root folder, under a bare file name."""
        name = image_file_name(a.str_or_empty(self.args, "filename"), self._description)
        root = (self.settings.workspace_root or "").rstrip("/")
        return f"{root}/{name}" if root else name

    @property
    def aspect_ratio(self) -> str:
        ratio = a.str_or_empty(self.args, "aspect_ratio").strip()
        return ratio if ratio in ASPECT_RATIOS else ""

    def _argument_problem(self) -> str | None:
        problem = super()._argument_problem()
        if problem is not None:
            return problem
        ratio = a.str_or_empty(self.args, "aspect_ratio").strip()
        if ratio and ratio not in ASPECT_RATIOS:
            return f"Error: aspect_ratio must be one of {', '.join(ASPECT_RATIOS)}, not {ratio!r}."
        return None

    def _args(self) -> agent_pb2.GenerateImageArgs:
        out = agent_pb2.GenerateImageArgs(description=self._description, file_path=self.file_path)
        paths = self.args.get("reference_image_paths")
        out.reference_image_paths.extend(
            p for p in (paths if isinstance(paths, list) else ()) if isinstance(p, str)
        )
        if self.aspect_ratio:
            out.aspect_ratio = self.aspect_ratio
        return out

    def _card(self) -> agent_pb2.ToolCall:
        tc = self._new_card()
        tc.generate_image_tool_call.args.CopyFrom(self._args())
        return tc

    def _set_error(self, tc: agent_pb2.ToolCall, text: str) -> None:
        tc.generate_image_tool_call.result.error.error = text

    def _query(self) -> agent_pb2.GenerateImageRequestQuery:
        return agent_pb2.GenerateImageRequestQuery(
            args=self._args(), tool_call_id=self.tool_call_id
        )

    def _on_answer(self, response: agent_pb2.GenerateImageRequestResponse, now_ms: int) -> Step:
        match response.WhichOneof("result"):
            case "approved":
                # The user may have edited the description in the approval.
                self._description = response.approved.description or self._description
                job = ImageJob(description=self._description, aspect_ratio=self.aspect_ratio)
                return self._run_job(job)
            case "rejected":
                reason = response.rejected.reason or "no reason given"
                return self._finish_error(
                    f"The user declined generating the image: {reason}", now_ms
                )
            case _:
                return self._finish_error(
                    "Error: the client answered the GenerateImage request with neither an "
                    "approval nor a rejection; no image was made.",
                    now_ms,
                )

    def _on_job_done(self, outcome: JobOutcome, now_ms: int) -> Step:
        match outcome:
            case ImageMade():
                self._image = outcome
                write = agent_pb2.WriteArgs(
                    path=self.file_path, file_bytes=outcome.data, tool_call_id=self.tool_call_id
                )
                return self._next_exec(Phase.WRITING, "write_args", write)
            case JobFailed(message=message):
                return self._finish_error(f"Error: the image was not generated: {message}", now_ms)
            case _:
                return self._finish_error(
                    "Error: the server answered the image request with something else.", now_ms
                )

    def _on_write(self, result: agent_pb2.WriteResult, now_ms: int) -> Step:
        path = self.file_path
        failure = write_failure(result, path)
        if failure is not None:
            return self._finish_error(f"The image was generated but not saved. {failure}", now_ms)
        image = self._image
        assert image is not None  # the write went out with it
        written = result.success.path or path
        tc = self._card()
        success = tc.generate_image_tool_call.result.success
        success.file_path = written
        success.image_data = base64.b64encode(image.data).decode("ascii")
        info = sniff_image(image.data)
        about = info.describe(len(image.data)) if info is not None else f"{len(image.data)} bytes"
        text = f"The image was generated and saved to {written} ({about})."
        if info is not None and not written.lower().endswith(_EXTENSIONS[info.kind.name]):
            text += f" Its content is {info.kind.name}, whatever the file name says."
        return self._finish(text, tc, now_ms)

    def _on_throw(self, error: str, code: str, now_ms: int) -> Step:
        return self._finish_error(
            f"Error: the image was generated but the client could not save it{code}: {error}",
            now_ms,
        )

    HANDLERS: ClassVar[Handlers] = {Phase.WRITING: {"write_result": _on_write}}
