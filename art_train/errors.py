"""The errors the service answers with: each carries the HTTP status and OpenAI error type it becomes."""

from __future__ import annotations

__all__ = ["ServiceError", "WeightSyncError"]


class ServiceError(RuntimeError):
    """A request the service cannot serve; `status` and `type` become the HTTP error."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.type = type


class WeightSyncError(ServiceError):
    """The engine does not serve the weights the trainer just saved."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=500, type="weight_sync_error")
