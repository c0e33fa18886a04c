"""The replay's model lookup: the gateway's /v1/models, asked with the first key it does
not refuse (`--api-key`, then the tenants' keys: a 401 or 403 moves on to the next), to
check `--model` or to pick the gateway's first model (runner.py, cli.py; QA221 F5)."""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp

REFUSED_STATUSES = (401, 403)   # /v1/models refusing a key: the model lookup asks with the next one


class NoModelListed(RuntimeError):
    """The gateway's /v1/models lists no model for the replay's key."""


class GatewayUnreachable(RuntimeError):
    """No connection to the gateway could be made before the replay started."""


class ModelNotServed(RuntimeError):
    """The gateway's /v1/models does not list the replay's `--model` (args: the model, the
    ids it lists)."""


def _key_list(api_keys: str | Sequence[str]) -> tuple[str, ...]:
    return (api_keys,) if isinstance(api_keys, str) else tuple(api_keys)


async def check_model(session: aiohttp.ClientSession, base_url: str, api_keys: str | Sequence[str],
                      model: str) -> None:
    """A GET of /v1/models with the first of `api_keys` it does not refuse (401/403: the
    next key is asked; the last one's answer counts): GatewayUnreachable when it cannot connect, so a replay given
    `--model` and a wrong port stops at once rather than pacing the whole trace through
    connection errors; ModelNotServed when it lists models and `model` is not one of them
    (every request would get a 404). Any other answer passes: a wrong key shows as each
    request's error, as without this check. A URL aiohttp finds invalid is
    GatewayUnreachable too (cli.py refuses a malformed one first). NOTE: aiohttp's
    InvalidURL is a ValueError, which must not pass as a body that is not JSON."""
    keys = _key_list(api_keys)
    try:
        for number, key in enumerate(keys, 1):
            async with session.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {key}"}) as response:
                if response.status in REFUSED_STATUSES and number < len(keys):
                    continue
                listed = await response.json(content_type=None) if response.status == 200 else None
            break
        else:   # no key at all: nothing to check with
            return
    except (aiohttp.ClientConnectionError, aiohttp.InvalidURL, asyncio.TimeoutError) as exc:
        raise GatewayUnreachable(f"{type(exc).__name__}: {exc}") from None
    except ValueError:   # not JSON: not an OpenAI model list, nothing to check against
        return
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return
    ids = [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]
    if model not in ids:
        raise ModelNotServed(model, ids)


async def resolve_model(session: aiohttp.ClientSession, base_url: str, api_keys: str | Sequence[str]) -> str:
    """The first model the gateway lists to the first of `api_keys` it does not refuse
    (401/403: the next key is asked). aiohttp.ClientError when it cannot be asked (the last
    key's refusal when it refuses every one), NoModelListed when it lists none or there is
    no key to ask with."""
    keys = _key_list(api_keys)
    for number, key in enumerate(keys, 1):
        async with session.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {key}"}) as response:
            if response.status in REFUSED_STATUSES and number < len(keys):
                continue
            response.raise_for_status()
            models = (await response.json()).get("data") or []
        if not models:
            raise NoModelListed("the gateway lists no models")
        return str(models[0]["id"])
    raise NoModelListed("no API key to ask the gateway's /v1/models with")
