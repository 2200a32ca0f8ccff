"""``config.json`` of a Hugging Face Hub model that is no preset and no local path (issue 23).

:func:`hub_spec` fetches ``{HF_ENDPOINT or https://huggingface.co}/{id}/resolve/{revision}/
config.json`` with one plain GET (no retries), a size cap (:data:`MAX_BYTES`) and a timeout
(``FMEST_HUB_TIMEOUT`` seconds, default :data:`DEFAULT_TIMEOUT_S`), sends ``HF_TOKEN`` as a
bearer token when set, and keeps what it fetched under the fmest cache folder
(``$FMEST_CACHE_DIR``, default ``~/.cache/fmest``, the folder
``fmest.compat.fm_training_estimator.learned.cache_dir`` uses) in ``hub-configs/``. A later lookup
of the same id reads the cache without the network. One lookup at a time per id: concurrent
requests (``fmest serve``) for the same id wait on a per-id lock and then find the cache.

``HF_HUB_OFFLINE=1`` or ``FMEST_OFFLINE=1``: the cache only, no network. Every failure is an
:class:`~fmest.errors.UnknownNameError` naming the model and why the lookup failed, with the
near preset names. The :class:`~fmest.models.spec.ModelSpec` ``source`` says which happened:
``"fetched from the Hugging Face Hub: <url>"`` or ``"Hugging Face Hub cache <file> (fetched from
<url>)"``. This module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterable, Optional

from fmest.errors import UnknownNameError
from fmest.models.spec import ModelSpec

#: Most bytes read of a config.json: published configs are a few KB (Llama-3.1-405B's is about
#: 1 KB, multimodal ones with nested vision/text configs tens of KB), so 2 MiB bounds what a
#: wrong endpoint can make fmest hold, with room to spare.
MAX_BYTES = 2 << 20

#: Seconds to wait for the Hub when ``FMEST_HUB_TIMEOUT`` is unset: a config.json is one small
#: GET; a reachable Hub answers in well under a second, an unreachable one should not hold a
#: request longer than this.
DEFAULT_TIMEOUT_S = 10.0

#: Sub-folder of the fmest cache folder holding fetched configs.
CACHE_SUBDIR = "hub-configs"

_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_OFF = ("", "0", "false", "no", "off")  # values that leave a flag unset (as local.py reads)

_locks_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def looks_like_hub_id(name: str) -> bool:
    """``owner/name`` with the characters Hub repository ids use."""
    return bool(_ID.match(name)) and ".." not in name


def offline() -> bool:
    """``HF_HUB_OFFLINE`` or ``FMEST_OFFLINE`` set to anything but empty/0/false/no/off."""
    return any(os.environ.get(k, "").strip().lower() not in _OFF
               for k in ("HF_HUB_OFFLINE", "FMEST_OFFLINE"))


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def timeout_s() -> float:
    """``FMEST_HUB_TIMEOUT`` (seconds, > 0) or :data:`DEFAULT_TIMEOUT_S`."""
    raw = os.environ.get("FMEST_HUB_TIMEOUT", "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value:
        from fmest.errors import InputError

        raise InputError("FMEST_HUB_TIMEOUT", "must be a number of seconds above 0", value=raw)
    return value


def cache_dir() -> Path:
    """``$FMEST_CACHE_DIR/hub-configs``, default ``~/.cache/fmest/hub-configs``."""
    base = os.environ.get("FMEST_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                               "fmest")
    return Path(base) / CACHE_SUBDIR


def _cache_file(model_id: str, revision: str) -> Path:
    safe = model_id.replace("/", "--")
    return cache_dir() / safe / urllib.parse.quote(revision, safe="") / "config.json"


def config_url(model_id: str, revision: str = "main") -> str:
    return f"{endpoint()}/{model_id}/resolve/{urllib.parse.quote(revision, safe='')}/config.json"


def _lock_for(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


def _failure(model_id: str, why: str, near: Iterable[str]) -> UnknownNameError:
    near = list(near)
    return UnknownNameError(
        field="model",
        message="not a preset, not a local config.json, and the Hub lookup failed: " + why +
                ("; did you mean one of the listed" if near else
                 "; fmest models lists the presets"),
        value=model_id, accepted=near)


def _get(url: str, timeout: float) -> bytes:
    """The body of ``url`` (at most :data:`MAX_BYTES` + 1 bytes read); raises ``_Failed``."""
    headers = {"User-Agent": "fmest", "Accept": "application/json"}
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (http(s) only)
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > MAX_BYTES:
                raise _Failed(f"{url} is {int(length):,} bytes, over the {MAX_BYTES:,}-byte cap "
                              f"for a config.json")
            body = resp.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as e:
        hint = {401: " (gated or private: set HF_TOKEN)", 403: " (gated: set HF_TOKEN and "
                "accept the model's licence)", 404: " (no such model, or no config.json in it)"}
        raise _Failed(f"HTTP {e.code} for {url}{hint.get(e.code, '')}") from None
    except _Failed:
        raise
    except (TimeoutError, OSError, ValueError) as e:  # URLError, socket timeout, refused, DNS
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise _Failed(f"no answer from {endpoint()} within {timeout:g} s "
                          f"(FMEST_HUB_TIMEOUT)") from None
        raise _Failed(f"cannot reach {endpoint()} ({reason})") from None
    if len(body) > MAX_BYTES:
        raise _Failed(f"{url} is over the {MAX_BYTES:,}-byte cap for a config.json")
    return body


class _Failed(Exception):
    pass


def _parse(body: bytes, where: str) -> dict:
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _Failed(f"{where} is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise _Failed(f"{where} is not a JSON object (a transformers config.json)")
    return data


def _write_cache(path: Path, body: bytes) -> None:
    from fmest.atomic import write_atomic

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(body)

    try:
        write_atomic(path, write)
    except Exception:  # a read-only cache folder: the answer stands, it is just not kept
        pass


def fetch_config(model_id: str, *, revision: str = "main", near: Iterable[str] = (),
                 timeout: Optional[float] = None) -> tuple[dict, str]:
    """``(config dict, source text)`` of ``model_id``: the cache, else one GET from the Hub.

    ``timeout``: seconds, default ``FMEST_HUB_TIMEOUT`` (:func:`timeout_s`). Raises
    :class:`UnknownNameError` (field ``model``) saying why the lookup failed.
    """
    if not looks_like_hub_id(model_id):
        raise _failure(model_id, "not a Hub id (owner/name)", near)
    url = config_url(model_id, revision)
    path = _cache_file(model_id, revision)
    with _lock_for(f"{model_id}@{revision}"):
        if path.is_file():
            try:
                data = _parse(path.read_bytes(), str(path))
            except (OSError, _Failed):
                data = None  # a damaged cache entry: fetch it again (unless offline)
            if data is not None:
                return data, f"Hugging Face Hub cache {path} (fetched from {url})"
        if offline():
            flag = "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() \
                not in _OFF else "FMEST_OFFLINE"
            raise _failure(model_id, f"{flag} is set and {path} holds no cached copy", near)
        try:
            body = _get(url, timeout if timeout is not None else timeout_s())
            data = _parse(body, url)
        except _Failed as e:
            raise _failure(model_id, str(e), near) from None
        _write_cache(path, body)
        return data, f"fetched from the Hugging Face Hub: {url}"


def hub_spec(model_id: str, *, revision: str = "main", near: Iterable[str] = (),
             timeout: Optional[float] = None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hub model's ``config.json`` (see :func:`fetch_config`)."""
    from fmest.models.hf import spec_from_hf_config

    data, source = fetch_config(model_id, revision=revision, near=near, timeout=timeout)
    return spec_from_hf_config(data, name=model_id, source=source)


__all__ = ["MAX_BYTES", "DEFAULT_TIMEOUT_S", "CACHE_SUBDIR", "cache_dir", "config_url",
           "endpoint", "fetch_config", "hub_spec", "looks_like_hub_id", "offline", "timeout_s"]
