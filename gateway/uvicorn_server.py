"""The gateway's uvicorn `Server`: a start that Ctrl+C or SIGTERM stops at once (and one
that went on to its end all the same never listens nor says it serves), the address
announced once it listens, the app's first steps of a stop taken as the stop begins
(before the connections drain), a stop by either signal that returns (uvicorn raises
the signal again once stopped: SIGTERM's default action would end the process by the
signal, a clean stop reading as a failure), and uvicorn's reports of a failed start or
of a request cut at shutdown in one line each instead of a traceback, naming the request
and the true reason (used by `stepahead serve`, gateway/serve_command.py). Under
`uvicorn --factory gateway.app:build_app` uvicorn makes the server: `set_up_factory_logging`
gives its loggers what `stepahead serve` gives them, as far as the app can.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable

from gateway.start_failure import start_failure_line

REPORTS_LOGGER = "uvicorn.error"   # uvicorn's own lines; the level `--log-level` set


def start_aware_server_class(cancel_start: Callable[[], None], announce: Callable[[int], None] | None = None,
                             begin_stop: Callable[[], None] | None = None):
    """uvicorn's Server, stopping the gateway's start at once on Ctrl+C (SIGINT) or
    SIGTERM: uvicorn itself would wait until the start is done (a first start converts
    the embedded model, 10–20 s) and stop then. `cancel_start` (called on the
    event loop) makes the start fail with shards.transport.StartCancelled, having stopped
    what it began (workers, the child converting the model); the server then returns
    without listening, `start_cancelled_by` naming the signal, and uvicorn's report of
    that failure is not logged (it is no failure). A start the signal came during that
    ended all the same (a backend that cannot stop mid-way: an upstream model's
    `import litellm`, or the signal landing after the models started) is undone the same
    way: the app stopped again before the server listens. `start_cancelled_by` is set
    exactly when a signal came before the server was started, and then `announce` is
    never called (a signal while it binds: it stops once bound, unannounced).
    `announce(port)` is called once the start is done and the server listens, with the
    port bound (`port = 0`: the one the system gave). Once it served, `run` returns when
    a signal stopped it, never raising that signal again. `begin_stop` (called on the
    event loop, once) is the app's first steps of a stop of a server that served: it runs
    as the stop begins (the first SIGTERM or Ctrl+C, or `should_exit` set), before uvicorn
    stops listening and drains the connections; the app's lifespan ends only after the
    drain. `drain_timed_out` says, once stopped, whether the shutdown timeout
    (`timeout_graceful_shutdown`) cancelled requests that were still running then."""
    import uvicorn

    class Server(uvicorn.Server):
        start_cancelled_by: int | None = None
        drain_timed_out = False
        _loop: asyncio.AbstractEventLoop | None = None

        def run(self, sockets=None) -> None:
            # NOTE: around the whole event loop, not `serve`: a forced stop (a second Ctrl+C)
            # cancels the requests and the lifespan once `serve` has returned
            reports = logging.getLogger("uvicorn.error")
            filters = (StartReports(self), CutRequests(self))
            for each in filters:
                reports.addFilter(each)
            try:
                super().run(sockets)
            finally:
                for each in filters:
                    reports.removeFilter(each)

        async def serve(self, sockets=None) -> None:
            self._loop = asyncio.get_running_loop()
            await super().serve(sockets)

        async def shutdown(self, sockets=None) -> None:
            if begin_stop is not None:
                try:
                    begin_stop()
                except Exception:   # NOTE: the stop goes on: the lifespan's end does it all the same
                    logging.getLogger("uvicorn.error").exception("stepahead: the stop's first steps failed")
            try:
                await super().shutdown(sockets)
            finally:
                # uvicorn's timeout cancelled the requests then running: those that outlive that
                # cancel are cut again, without its message, as the event loop ends
                self.drain_timed_out = any(task.cancelling() for task in self.server_state.tasks)

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                if self.start_cancelled_by is not None or self.started:   # handled: `serve` says what it was
                    self._captured_signals.clear()   # uvicorn would raise it again (SIGTERM: killed, unsaid)

        async def startup(self, sockets=None) -> None:
            start_app = self.lifespan.startup   # the app's start, which uvicorn's startup awaits before binding
            self.lifespan.startup = lambda: self._start_app_unless_stopped(start_app)
            try:
                await super().startup(sockets)
            except SystemExit:   # uvicorn's exit when the application did not start
                if self.start_cancelled_by is None:
                    raise
                return
            if self.started and self.start_cancelled_by is None and announce is not None:
                announce(self.servers[0].sockets[0].getsockname()[1])

        async def _start_app_unless_stopped(self, start_app) -> None:
            """The app's start; one that a signal came during but that ended all the same
            is undone (the app stopped again) and told to uvicorn as not started, so the
            server never binds."""
            await start_app()
            if self.start_cancelled_by is not None and not self.lifespan.should_exit:
                await self.lifespan.shutdown()
                self.lifespan.should_exit = True   # uvicorn: sys.exit(STARTUP_FAILURE), caught above

        def handle_exit(self, sig, frame) -> None:
            starting = not self.started
            super().handle_exit(sig, frame)
            if starting and self.start_cancelled_by is None and self._loop is not None:
                self.start_cancelled_by = sig
                self._loop.call_soon_threadsafe(cancel_start)
                # NOTE: a signal handler: no print(), which raises when the signal lands
                # in the middle of another write to stderr (and lost the stop, once)
                with contextlib.suppress(OSError):
                    os.write(2, b"stepahead: stopping the start in progress\n")

    return Server


STARTUP_FAILED = "Application startup failed. Exiting."   # uvicorn's line after the failure's report


class StartReports(logging.Filter):
    """uvicorn's reports of a start that did not finish. Once the start was cancelled on
    purpose (by `server`, when given), none: the operator asked for the stop and is told it happened. For a start
    that failed with a stated reason (gateway.start_failure.StartFailed), that reason in
    one line instead of the traceback, and nothing after it: uvicorn's STARTUP_FAILED line
    is kept only after an unexpected failure's traceback, which it ends."""

    def __init__(self, server=None) -> None:
        super().__init__()
        self._server = server
        self._stated = False   # a stated reason was logged: the start's failure is told

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if getattr(self._server, "start_cancelled_by", None) is not None:
            return not (message == STARTUP_FAILED or "StartCancelled" in message)
        if message == STARTUP_FAILED:
            return not self._stated
        reason = start_failure_line(message)
        if reason is not None:
            record.msg, record.args, record.exc_info = f"stepahead: the start failed: {reason}", (), None
            self._stated = True
        return True


SHUTDOWN_TIMEOUT = "the shutdown timeout passed"
FORCED_STOP = "the stop was forced"


class CutRequests(logging.Filter):
    """uvicorn's reports of what a stop cut: a request in flight that the shutdown timeout
    (`[server] shutdown_timeout_s`) or a forced stop (a second Ctrl+C) cancelled, one line
    each instead of the traceback of its task's cancellation, naming the request (method
    and path) where its traceback shows it; and the app's shutdown that a forced stop
    cancelled (starlette reports it as a traceback), one line. The reason is the
    timeout's when uvicorn's cancel says so, or when the server's timeout cancelled
    requests that outlived that cancel (the event loop's end cuts them again, without a
    message); a forced stop's when the server was forced (`force_exit`). Without the
    server (`server` None) a cancel without the timeout's message is taken as forced."""

    def __init__(self, server=None) -> None:
        super().__init__()
        self._server = server

    def filter(self, record: logging.LogRecord) -> bool:
        cut = record.exc_info[1] if record.exc_info else None
        if isinstance(cut, asyncio.CancelledError):
            request = cut_request(cut)
            line = f"stepahead: a request in flight was cut: {self._why(cut)}"
            record.msg = line if request is None else f"{line} ({request})"
            record.args, record.exc_info = (), None
        elif record.exc_info is None and isinstance(record.msg, str) and record.msg.startswith("Traceback") \
                and record.msg.rstrip().endswith("CancelledError"):
            record.msg = "stepahead: the stop was forced: the shutdown did not wait for what was running"
            record.args = ()
        return True

    def _why(self, cut: asyncio.CancelledError) -> str:
        server = self._server
        if "graceful shutdown" in str(cut) or getattr(server, "drain_timed_out", False):
            return SHUTDOWN_TIMEOUT
        if server is None or getattr(server, "force_exit", False):
            return FORCED_STOP
        return "the server stopped before it ended"


def cut_request(cut: BaseException) -> str | None:
    """The method and path ("POST /v1/responses") of the HTTP request whose task `cut`
    ended, read from the frames its traceback passed through (uvicorn's report carries no
    scope); None when none shows it."""
    frames = cut.__traceback__
    while frames is not None:
        scope = frames.tb_frame.f_locals.get("scope")
        if isinstance(scope, dict) and scope.get("type") == "http":
            return f"{scope.get('method')} {scope.get('path')}"
        frames = frames.tb_next
    return None


def called_by_uvicorn() -> bool:
    """Whether uvicorn's `Config.load` is on the caller's stack: the app factory is being
    called by uvicorn (`uvicorn --factory`, or a server uvicorn runs the same way), which
    configured its logging first, not by a test or an embedder in-process."""
    from uvicorn.config import Config

    load = Config.load.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is load:
            return True
        frame = frame.f_back
    return False


def set_up_factory_logging() -> None:
    """For a server uvicorn made and its factory `build_app`: the product's log lines
    (gateway/log_lines.py) for the rest of the process, at the level uvicorn's
    `--log-level` gave its own loggers; a failed start's stated reason in one line and a
    request a stop cut in one line (`StartReports`, `CutRequests`: once each, however often
    called). The access log's redaction is `build_app`'s in any case. What only
    `uvicorn.Config` sets (the shutdown timeout, keep-alive, the guarded HTTP protocol) is
    the operator's to pass to uvicorn: docs/serving.md, "Under `uvicorn --factory`"."""
    from gateway.log_lines import install_log_lines

    reports = logging.getLogger(REPORTS_LOGGER)
    install_log_lines(reports.getEffectiveLevel(), use_colors=uvicorn_use_colors())
    for kind in (StartReports, CutRequests):
        if not any(isinstance(each, kind) for each in reports.filters):
            reports.addFilter(kind())


def uvicorn_use_colors() -> bool | None:
    """Whether uvicorn's own lines are coloured, as its formatter settled it (`--use-colors`,
    `--no-use-colors`, else a terminal's): None where its logging is not uvicorn's default."""
    for handler in logging.getLogger("uvicorn").handlers:
        use_colors = getattr(handler.formatter, "use_colors", None)
        if isinstance(use_colors, bool):
            return use_colors
    return None
