"""Before `art autorl` starts anything: can the judge and the generator be reached, with credentials?

A hosted judge without its API key used to fail on every group, drop them all, train nothing and
exit 0. This check fails first, naming the fix. It sends no completion: it asks litellm which keys
the provider needs (`validate_environment`), and with an explicit api_base it asks the endpoint for
its model list (any answer but 401/403 means it is there).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["PreflightError", "check_llm"]


class PreflightError(RuntimeError):
    """A judge or generator the run could not use."""


def check_llm(litellm: Any, role: str, model: str, api_base: str | None, api_key: str | None,
              timeout: float = 10.0) -> None:
    """Raise `PreflightError` if `model` (the run's `role`: judge or generator) cannot be used."""
    flag = f"--{role}"
    if not api_key:
        missing = litellm.validate_environment(model=model, api_base=api_base).get("missing_keys") or []
        if missing:
            raise PreflightError(
                f"the {role} {model} has no credentials: set {' or '.join(missing)} (or pass {flag}-api-key), "
                f"or use {flag} self to have the base model do it")
    if not api_base:
        return
    url = api_base.rstrip("/") + "/models"
    try:
        r = httpx.get(url, headers={"Authorization": f"Bearer {api_key or ''}"}, timeout=timeout)
    except httpx.HTTPError as exc:
        raise PreflightError(
            f"the {role} {model} cannot be reached at {api_base} ({type(exc).__name__}: {exc}); start it, or fix "
            f"{flag}-api-base") from exc
    if r.status_code in (401, 403):
        raise PreflightError(f"the {role} {model} at {api_base} refused the API key (HTTP {r.status_code}); "
                             f"pass the right {flag}-api-key")
