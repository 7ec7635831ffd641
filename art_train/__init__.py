"""ART's bundled backend: inference engines, the trainer, `LocalBackend` and the `art serve` server.

Importing it is light; torch loads when an engine or the trainer is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["BackendConfig", "LocalBackend", "ModelService", "__version__", "create_app"]

if TYPE_CHECKING:
    from .config import BackendConfig
    from .local import LocalBackend
    from .server import create_app
    from .service import ModelService


def __getattr__(name: str) -> Any:
    if name == "BackendConfig":
        from .config import BackendConfig

        return BackendConfig
    if name == "LocalBackend":
        from .local import LocalBackend

        return LocalBackend
    if name == "ModelService":
        from .service import ModelService

        return ModelService
    if name == "create_app":
        from .server import create_app

        return create_app
    raise AttributeError(f"module 'art_train' has no attribute {name!r}")
