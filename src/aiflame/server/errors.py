"""Errors a request can end with: each is one HTTP status and one clear message.

A client's mistake is a 4xx with a message that says what was wrong, never a 500; nothing of
a request that ends in one of these is stored.
"""

from __future__ import annotations


class RequestError(Exception):
    status = 400
    connect_code = "invalid_argument"  # the Connect protocol's name for it

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class BadRequest(RequestError):
    pass


class Unauthorized(RequestError):
    status = 401
    connect_code = "unauthenticated"


class Forbidden(RequestError):
    status = 403
    connect_code = "permission_denied"


class NotFound(RequestError):
    status = 404
    connect_code = "not_found"


class Conflict(RequestError):
    """A write older than what is stored (a setting changed by someone else since)."""

    status = 409
    connect_code = "already_exists"


class PayloadTooLarge(RequestError):
    status = 413
    connect_code = "resource_exhausted"


class UnsupportedMediaType(RequestError):
    status = 415
    connect_code = "invalid_argument"


class Overloaded(RequestError):
    """The server cannot take it now (queue full, shutting down): retry later."""

    status = 503
    connect_code = "unavailable"


class Unstorable(RequestError):
    """The store refused a request's rows while it takes others' (the request is set aside,
    not retried): what the checks at the door should have refused."""

    status = 422
    connect_code = "invalid_argument"


class TooManyRequests(RequestError):
    """A client has more requests in flight than its share: retry after a moment."""

    status = 429
    connect_code = "resource_exhausted"
