"""Reloading the tenants of a running gateway from its config file (SIGHUP).

Adding a tenant, rotating a key or changing a limit must not cost a restart: a restart
drops every worker's KV cache, the very thing the gateway keeps hot. `stepahead serve
--config FILE` (or `$STEPAHEAD_CONFIG` under `uvicorn --factory`) reloads FILE on SIGHUP.

Invariants:
- a file that does not load or parse changes nothing (the error is logged, the running
  tenants keep serving); nor does one giving a tenant a `token_budget` it had not while
  the spent tokens file cannot be written (as a start refuses it: gateway/store_places.py);
- tenants' keys, `admin` and `limits` take effect at once: a removed tenant's keys stop
  working, its requests still running finish; a tenant's running and queued requests and
  spent token budget carry over (`Limiters.update`);
- tenants' `weight` and `kv_share` take effect at once on every local model's engine and
  workers (and on a worker restarted later), as a start would have applied them
  (`LocalBackend.set_tenant_shares`): the workers' KV cache stays; the line says "in
  force" of the models whose engines' shares changed, and one ignored is warned of as
  the start warns of it (gateway/tenant_shares.py);
- the `[[models]]`, `[server]` and `[tracing]` sections take effect at the next start (changed
  models that start would refuse, a bad engine option or a missing model, refuse the
  reload, as the start's check says; so does a changed `[server] responses_db` or
  `[tracing]` whose stores' places that start would refuse, tried as `config check` tries
  them: no SQLite file set aside); the log line says which of them changed, compared as the command line would make them at a
  start (`overrides`): what a flag fixes (`--port`, `--host`, `--capture-content`) is never
  reported as changed;
- every reload, applied or refused, counts in an admin's `/metrics`
  (`stepahead_config_reloads_total` by outcome), and one applied sets
  `stepahead_config_last_reload_success_timestamp_seconds` (the start's time until then);
- a SIGHUP never ends the gateway: without a config file it logs that there is nothing
  to reload; once SIGINT or SIGTERM began the stop it never reloads (gateway/stopping.py);
- the reload's line is one line in one write: names in it are escaped, so a tenant named
  with a newline cannot split it, and another thread's output cannot land inside it.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.auth import KeyRing
from gateway.config import SERVER_KEYS, ConfigError, GatewayConfig, TenantConfig, load_config
from gateway.config_check import store_places_failure
from gateway.hangups_at_exit import HANGUP_WHILE_STOPPING
from gateway.start_failure import StartFailed
from gateway.state import GatewayState
from gateway.stderr_line import stderr_line
from gateway.serve_command import local_model_problem
from gateway.stopping import stop_began
from gateway.store_places import budgeted_tenants, check_spent_tokens_place
from gateway.tenant_shares import log_notes

log = logging.getLogger("stepahead")

SECTIONS_AT_NEXT_START = ("models", "tracing", *SERVER_KEYS)
STORE_SETTINGS = ("responses_db", "tracing")   # where the stores write: tried when changed
SECTION_NAMES = {"models": "[[models]]", "tracing": "[tracing]"}
NOTHING_TO_RELOAD = "stepahead: nothing to reload: started without --config (SIGHUP ignored)"

# What the command line sets over a config file (gateway/serve_command.py), applied to a
# reloaded file as at a start.
Overrides = Callable[[GatewayConfig], GatewayConfig]


def shown(name: object) -> str:
    """`name` as it can stand in a one-line log message: as it is when every character
    prints, else its Python repr (a newline as `\\n`, quoted), so it cannot split the line."""
    text = str(name)
    return text if text.isprintable() else repr(text)


@dataclass(frozen=True, slots=True)
class ReloadReport:
    """What a reload changed, and what waits for the next start."""
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]
    at_next_start: tuple[str, ...]
    shares_applied_to: tuple[str, ...] = ()   # the models whose engines took new weights / kv_shares

    def line(self, path: Path) -> str:
        counts = ", ".join(f"{len(tenants)} {what}" + (f" ({', '.join(map(shown, tenants))})" if tenants else "")
                           for what, tenants in (("added", self.added), ("removed", self.removed),
                                                 ("changed", self.changed)))
        line = f"stepahead: reloaded the tenants from {shown(path)}: {counts}"
        if self.shares_applied_to:
            line += f"; weights and kv_shares in force on {', '.join(repr(m) for m in self.shares_applied_to)}"
        if self.at_next_start:
            line += f"; at the next start: {', '.join(self.at_next_start)}"
        return line


def apply_tenants(state: GatewayState, new: GatewayConfig) -> ReloadReport:
    """Make `new`'s tenants the running ones (keys, admins, limits, and the local models'
    weights and kv_shares); on the event loop."""
    running = state.config
    old_by_name = {tenant.name: tenant for tenant in running.tenants}
    new_by_name = {tenant.name: tenant for tenant in new.tenants}
    at_next_start = [SECTION_NAMES.get(name, f"[server] {name}")
                     for name in SECTIONS_AT_NEXT_START if getattr(new, name) != getattr(running, name)]
    absent = TenantConfig(name="", key_digests=())   # the kv_share of a tenant not there
    # the weights: a tenant added or removed changes them even at the default weight (the
    # engines' weights name every tenant; QA172: /health kept a removed one, lacked a new one)
    weights_changed = ({name: tenant.weight for name, tenant in old_by_name.items()}
                       != {name: tenant.weight for name, tenant in new_by_name.items()})
    kv_shares_changed = any(old_by_name.get(name, absent).kv_share != new_by_name.get(name, absent).kv_share
                            for name in set(old_by_name) | set(new_by_name))
    shares_changed = tuple(field for field, changed in (("weight", weights_changed), ("kv_share", kv_shares_changed))
                           if changed)
    keys = KeyRing(new.tenants, state.keys.internal)   # raises before anything changes
    state.keys = keys
    state.limiters.update({tenant.name: tenant.limits for tenant in new.tenants})
    state.config = dataclasses.replace(running, tenants=new.tenants)
    applied_to = []
    if shares_changed:
        weights = {tenant.name: tenant.weight for tenant in new.tenants}
        kv_shares = {tenant.name: tenant.kv_share for tenant in new.tenants}
        for name, backend in state.backends.items():
            set_tenant_shares = getattr(backend, "set_tenant_shares", None)   # local models only
            if set_tenant_shares is not None:
                before = backend.engine.tenant_shares()
                log_notes(set_tenant_shares(weights, kv_shares, shares_changed))   # as the start warns
                if backend.engine.tenant_shares() != before:   # "in force" only where they changed (QA204 F2)
                    applied_to.append(name)
    return ReloadReport(
        added=tuple(sorted(set(new_by_name) - set(old_by_name))),
        removed=tuple(sorted(set(old_by_name) - set(new_by_name))),
        changed=tuple(sorted(name for name in set(new_by_name) & set(old_by_name)
                             if new_by_name[name] != old_by_name[name])),
        at_next_start=tuple(at_next_start), shares_applied_to=tuple(applied_to))


async def reload_tenants(state: GatewayState, path: Path, overrides: Overrides | None = None) -> ReloadReport | None:
    """Read `path` (off the event loop), with `overrides` (the command line's) applied, and
    apply its tenants; None, with the reason logged, when it cannot be loaded."""
    try:
        new = await asyncio.to_thread(load_config, path)
        if overrides is not None:
            new = overrides(new)
        if new.models != state.config.models:   # kept for the next start: that start would refuse them
            problem = await asyncio.to_thread(local_model_problem, new)
            if problem is not None:
                raise ConfigError(f"the next start would fail: {problem}")
        if any(getattr(new, name) != getattr(state.config, name) for name in STORE_SETTINGS):
            failure = await asyncio.to_thread(store_places_failure, new)   # as `config check` tries them
            if failure is not None:
                raise ConfigError(f"the next start would fail: {failure}")
        newly_budgeted = sorted(set(budgeted_tenants(new)) - set(budgeted_tenants(state.config)))
        await asyncio.to_thread(check_spent_tokens_place, newly_budgeted)
        report = apply_tenants(state, new)
    except (ConfigError, OSError, ValueError, StartFailed) as exc:
        state.metrics.record_reload(False, time.time())
        log.error("stepahead: the tenants were not reloaded from %s: %s", shown(path),
                  shown(str(exc).removeprefix(f"{path}: ")))   # a TOML error names the file already
        return None
    state.metrics.record_reload(True, time.time())
    stderr_line(report.line(path))
    return report


class HangupsBeforeStart:
    """SIGHUP's handler while no reload can run: `stepahead serve` reading its config and
    loading its code before the app starts, and the app stopping. It counts the signals
    instead of letting the default action end the gateway (a deploy's `kill -HUP` right
    after a restart, or a terminal's hang-up, would otherwise kill it). The app's
    handler, once installed, serves one reload for those counted: the file may have
    changed after it was read."""

    def __init__(self) -> None:
        self.num_seen = 0

    def __call__(self, signum, frame) -> None:
        self.num_seen += 1

    @classmethod
    def install(cls) -> HangupsBeforeStart | None:
        """Make a new one SIGHUP's handler; None where signals cannot be caught here
        (not the main thread, no SIGHUP)."""
        catcher = cls()
        try:
            signal.signal(signal.SIGHUP, catcher)
        except (ValueError, AttributeError, OSError):
            return None
        return catcher


class ReloadOnHangup:
    """SIGHUP, while installed, reloads the tenants from the config file (one reload at a
    time; a signal during one is served after it); with no file (`path` None), it logs
    that there is nothing to reload. Installed over a `HangupsBeforeStart`, it serves at
    once what that saw, and puts it back when removed. One the loop serves once the stop
    began (`stop_began`: maybe before the loop swapped this handler out), or once this was
    removed, is logged as ignored."""

    def __init__(self, state: GatewayState, path: Path | None, loop: asyncio.AbstractEventLoop,
                 overrides: Overrides | None = None) -> None:
        self.state, self.path, self.loop, self.overrides = state, path, loop, overrides
        self._pending: asyncio.Task | None = None
        self._again = False
        self._removed = False
        before = signal.getsignal(signal.SIGHUP)
        self._before = before if isinstance(before, HangupsBeforeStart) else None
        loop.add_signal_handler(signal.SIGHUP, self._on_hangup)
        if self._before is not None and self._before.num_seen:
            self._before.num_seen = 0
            self._on_hangup()

    def _on_hangup(self) -> None:
        if self._removed or stop_began():
            log.warning(HANGUP_WHILE_STOPPING)
            return
        if self.path is None:
            log.warning(NOTHING_TO_RELOAD)
            return
        if self._pending is not None and not self._pending.done():
            self._again = True
            return
        self._pending = self.loop.create_task(self._reload())

    async def _reload(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            await reload_tenants(self.state, self.path, self.overrides)

    def remove(self) -> None:
        self._removed = True   # a SIGHUP the loop had queued for it already is not served
        self.loop.remove_signal_handler(signal.SIGHUP)
        if self._before is not None:   # a SIGHUP while the app stops is counted, not fatal
            signal.signal(signal.SIGHUP, self._before)
        if self._pending is not None:
            self._pending.cancel()


def reload_on_hangup(state: GatewayState, config_path: str | None,
                     overrides: Overrides | None = None) -> ReloadOnHangup | None:
    """Install the SIGHUP handler of a gateway started from `config_path` (None: from no
    file, a SIGHUP is logged and ignored); None where signals cannot be caught (not the
    main thread: tests, embedders). The start's config is in force from now on (the
    reloads' metrics)."""
    state.metrics.record_config_loaded(time.time())
    try:
        return ReloadOnHangup(state, None if config_path is None else Path(config_path),
                              asyncio.get_running_loop(), overrides)
    except (ValueError, RuntimeError, NotImplementedError):
        return None
