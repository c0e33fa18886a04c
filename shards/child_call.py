"""One function call in a child process, which the caller can stop from another thread.

The engine's start prepares the model (the embedded GGUF's first conversion takes 10–20 s
here) in a child, so that the gateway's own process never imports torch. Ctrl+C during
the conversion must stop the start at once, not once it is done: the caller sets
`cancelled`, and the child is killed within `POLL_S`.

Invariants: when `call_in_child` returns or raises, the child has exited (killed if it
had to be; killed and not waited for at this process's exit when its fork server is stopped
and its status cannot come) and the pipe is closed; the child's exception comes back as
itself (or as a RuntimeError naming it, when it cannot be pickled); a child that dies
without a word raises ChildProcessError.
"""
from __future__ import annotations

import importlib
import os
import threading

from shards.exit_join import not_joined_at_exit
from shards.hangups_held import hangups_held, ignore_group_signals
from shards.safe_imports import no_working_directory_imports
from shards.transport import StartCancelled

POLL_S = 0.1
JOIN_AFTER_KILL_S = 5.0


def adopt_environment(environ: dict[str, str]) -> None:
    """Make this process's environment exactly `environ` (the caller's at the start)."""
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)


def call_by_name(environ: dict[str, str], module: str, function: str, args: tuple):
    """`module.function(*args)` with the caller's environment, importing `module` here:
    the caller sends names, so it need not import the module (and what it imports)."""
    adopt_environment(environ)
    return getattr(importlib.import_module(module), function)(*args)


def call_in_child(ctx, module: str, function: str, args: tuple, cancelled: threading.Event):
    """`module.function(*args)` in a child started from the multiprocessing context
    `ctx`, with this process's environment; its value, or its exception raised here.
    Raises StartCancelled, having killed the child, once `cancelled` is set."""
    stopped = f"{module}.{function} was stopped before it finished"
    if cancelled.is_set():
        raise StartCancelled(stopped)
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_call_and_send, args=(sender, dict(os.environ), module, function, args),
                        name=f"stepahead-{function}", daemon=True)
    try:
        with no_working_directory_imports(), hangups_held():   # held until the child ignores it
            child.start()
        sender.close()
        while not receiver.poll(POLL_S):
            if cancelled.is_set():
                raise StartCancelled(stopped)
        try:
            outcome, value = receiver.recv()
        except EOFError:
            raise ChildProcessError(f"the process running {module}.{function} exited "
                                    f"(exit status {_exit_status(child)})") from None
    except Exception as exc:
        if cancelled.is_set() and not isinstance(exc, StartCancelled):   # e.g. its fork server killed
            raise StartCancelled(stopped) from exc
        raise
    finally:
        if child.pid is not None:
            if child.is_alive():
                child.kill()
            child.join(JOIN_AFTER_KILL_S)
            if child.exitcode is None:   # its fork server did not tell (stopped): not waited for at exit
                not_joined_at_exit(child)
        receiver.close()
        sender.close()
    if outcome == "error":
        raise value
    return value


def _exit_status(child) -> int | None:
    child.join(JOIN_AFTER_KILL_S)
    return child.exitcode


def _call_and_send(sender, environ: dict[str, str], module: str, function: str, args: tuple) -> None:
    """The child: run the call, send ("value", v) or ("error", exc) back. Ctrl+C, and a
    SIGTERM or SIGHUP sent to the whole process group, reach it too; the caller decides
    whether the call stops, not the child (it started with SIGHUP held: `hangups_held`)."""
    ignore_group_signals()
    try:
        message = ("value", call_by_name(environ, module, function, args))
    except BaseException as exc:   # noqa: BLE001 — every failure goes back to the caller
        message = ("error", exc)
    try:
        try:
            sender.send(message)
        except OSError:
            raise
        except Exception:   # noqa: BLE001 — an unpicklable value or exception
            what = "raised an exception" if message[0] == "error" else "returned a value"
            sender.send(("error", RuntimeError(f"{module}.{function} {what} that cannot be sent back: "
                                               f"{message[1]!r}"[:500])))
    except OSError:   # BrokenPipeError included: the caller gave the call up and is gone
        pass
    finally:
        sender.close()
