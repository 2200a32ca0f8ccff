"""Model shapes from a local ``config.json`` or, when reachable, the Hugging Face Hub.

:func:`resolve_model` tries, in order: a shipped preset, a local path, the Hub. The Hub is only
tried when ``HF_HUB_OFFLINE`` is unset and fails fast (a few seconds) when unreachable.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional

from fmest.errors import InputError, UnknownNameError
from fmest.models.hf import spec_from_hf_config
from fmest.models.spec import ModelSpec

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def _read_config(path: Path, field: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise InputError(field, f"{path} is not valid JSON: {e}") from None
    except OSError as e:
        raise InputError(field, f"cannot read {path}: {e.strerror or e}") from None
    if not isinstance(data, dict):
        raise InputError(field, f"{path} must hold a JSON object (a transformers config.json)")
    return data


def spec_from_local(path: str | os.PathLike) -> ModelSpec:
    """A ``config.json`` file, or a folder holding one, -> :class:`ModelSpec` (source = path)."""
    p = Path(path).expanduser()
    if p.is_dir():
        cfg = p / "config.json"
        if not cfg.is_file():
            raise InputError("model", f"folder {p} has no config.json", value=str(path))
        name = p.resolve().name
    elif p.is_file():
        cfg = p
        name = p.resolve().parent.name if p.name == "config.json" else p.stem
    else:
        raise InputError("model", "no such file or folder", value=str(path))
    data = _read_config(cfg, "model")
    return spec_from_hf_config(data, name=data.get("_name_or_path") or name, source=str(cfg))


def _looks_like_hub_id(s: str) -> bool:
    return bool(_HUB_ID.match(s)) and not s.startswith((".", "/", "~"))


def _offline() -> bool:
    v = os.environ.get("HF_HUB_OFFLINE", "")
    return v.strip().lower() not in ("", "0", "false", "no", "off")


def spec_from_hub(model_id: str, timeout_s: float = 3.0, revision: str = "main") -> ModelSpec:
    """Fetch ``config.json`` of ``model_id`` from the Hub and convert it.

    Reads the local ``huggingface_hub`` cache first when that package is installed (also when
    ``HF_HUB_OFFLINE`` is set), then does one plain HTTPS GET (token from ``HF_TOKEN`` or
    huggingface_hub's login). Raises :class:`InputError` within about ``timeout_s`` seconds
    when the Hub cannot be reached, or at once when ``HF_HUB_OFFLINE`` is set.
    """
    field = "model"
    if not _looks_like_hub_id(model_id):
        raise InputError(field, "not a preset, local path or Hub id (owner/name)", value=model_id)
    data: Optional[dict] = None
    err: Optional[str] = None
    cached = _from_hf_cache(model_id, revision)
    if cached is not None:
        data = _read_config(cached, field)
    elif _offline():
        raise InputError(field, "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set "
                                "so the Hub was not asked", value=model_id)
    else:
        data, err = _fetch_with_deadline(model_id, revision, timeout_s)
    if data is None:
        raise InputError(field, f"could not fetch config.json from the Hugging Face Hub ({err}); "
                                f"use a preset name or a local config.json", value=model_id)
    if not isinstance(data, dict):
        raise InputError(field, "the Hub's config.json is not a JSON object", value=model_id)
    return spec_from_hf_config(data, name=model_id,
                               source=f"https://huggingface.co/{model_id}/blob/{revision}/config.json")


def _from_hf_cache(model_id: str, revision: str) -> Optional[Path]:
    """config.json from the local huggingface_hub cache, without touching the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except Exception:
        return None
    try:
        hit = try_to_load_from_cache(model_id, "config.json", revision=revision)
    except Exception:
        return None
    return Path(hit) if isinstance(hit, str) and os.path.isfile(hit) else None


def _hub_token() -> Optional[str]:
    tok = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if tok:
        return tok
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:
        return None


#: Most bytes read of a Hub ``config.json``: published configs are a few KB (Llama-3.1-405B:
#: ~1 KB; multimodal ones with nested vision/text configs: tens of KB), so 1 MiB bounds what a
#: wrong or hostile endpoint can make fmest hold, with room to spare.
HUB_CONFIG_MAX_BYTES = 1 << 20


def _fetch_with_deadline(model_id: str, revision: str,
                         timeout_s: float) -> tuple[Optional[dict], Optional[str]]:
    """GET https://huggingface.co/<id>/resolve/<rev>/config.json within ``timeout_s`` seconds.

    A plain HTTPS GET (no retries with back-off, unlike ``hf_hub_download``) run in a daemon
    thread, so that slow DNS cannot hold the caller past the deadline either.
    """
    import threading
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/{model_id}/resolve/{revision}/config.json"
    box: dict = {}

    def work() -> None:
        headers = {"User-Agent": "fmest"}
        token = _hub_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            req = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read(HUB_CONFIG_MAX_BYTES + 1)
            if len(raw) > HUB_CONFIG_MAX_BYTES:
                box["err"] = (f"config.json from {url} is over {HUB_CONFIG_MAX_BYTES:,} bytes "
                              "(the largest published model configs are a few tens of KB)")
                return
            box["data"] = json.loads(raw.decode("utf-8"))
        except urllib.error.HTTPError as e:
            box["err"] = f"HTTP {e.code} for {url}" + (
                " (gated or private: set HF_TOKEN)" if e.code in (401, 403) else "")
        except Exception as e:  # DNS, connection refused, timeout, bad JSON
            reason = getattr(e, "reason", e)
            box["err"] = f"{type(e).__name__}: {reason}"

    t = threading.Thread(target=work, name="fmest-hub-config", daemon=True)
    t.start()
    t.join(timeout_s + 0.5)
    if t.is_alive():
        return None, f"no answer from {endpoint} within {timeout_s:g} s"
    if "data" in box and not isinstance(box["data"], dict):
        return None, "config.json is not a JSON object"
    return box.get("data"), box.get("err")


def resolve_model(name_or_path: str, *, hub: bool = True, timeout_s: Optional[float] = None,
                  presets=None) -> ModelSpec:
    """Preset first, then a local path, then the alias table (fine-tunes -> their base preset,
    with a warning), then the Hub (:mod:`fmest.models.hub`: its cache only when
    ``HF_HUB_OFFLINE``/``FMEST_OFFLINE`` is set; ``hub=False`` skips it; ``timeout_s`` None means
    ``FMEST_HUB_TIMEOUT``).

    ``presets`` is the registry to look names up in (``find(name) -> loader``,
    ``all_keys()``): the engine passes its model registry, so presets registered by any plugin
    resolve here and ``FMEST_DISABLE_PLUGINS=models`` leaves only local paths and the Hub.
    ``None`` means the shipped presets (for callers without an engine). Errors list the nearest
    preset names.
    """
    if presets is None:
        presets = _ShippedPresets()
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError("model", "give a preset name, a config.json path or a Hub id",
                         value=name_or_path)
    s = name_or_path.strip()
    loader = presets.find(s)
    if loader is None and "/" in s:  # another owner's copy of a preset ("org/Llama-2-7b-hf")
        loader = presets.find(s.split("/")[-1])
    if loader is not None:
        return loader()
    p = Path(s).expanduser()
    if p.exists():
        return spec_from_local(p)
    if s.startswith((".", "/", "~")) or s.endswith(".json"):
        raise InputError("model", "no such file or folder (a local config.json or a model "
                         "folder holding one)", value=s)
    # a well-known fine-tune or renamed repo: its base preset, with a warning (aliases.json)
    from fmest.models.aliases import alias_loader

    alias = alias_loader(s, presets)
    if alias is not None:
        return alias()
    from fmest.models.presets import near_models

    near = near_models(s, presets.all_keys())
    if hub and _looks_like_hub_id(s):
        cached = _from_hf_cache(s, "main")  # huggingface_hub's own cache, no network
        if cached is not None:
            return spec_from_hf_config(_read_config(cached, "model"), name=s,
                                       source=f"Hugging Face Hub cache {cached}")
        # fmest's Hub lookup: its cache, else one GET (size cap, FMEST_HUB_TIMEOUT, per-id
        # lock, HF_HUB_OFFLINE/FMEST_OFFLINE); failures are UnknownNameError with ``near``
        from fmest.models.hub import hub_spec

        return hub_spec(s, near=near, timeout=timeout_s)
    why = "no preset, local file or folder by that name" + (
        "" if near else "; fmest models lists the presets")
    raise UnknownNameError(field="model", message=why, value=s, accepted=near)


class _ShippedPresets:
    """The shipped presets with the registry's lookup interface."""

    def find(self, name: str):
        from fmest.models import presets

        canon = presets.find_preset(name)
        return None if canon is None else (lambda: presets.load_preset(canon))

    def all_keys(self) -> list[str]:
        from fmest.models import presets

        return presets.preset_names(include_aliases=True)
