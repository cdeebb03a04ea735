"""Tokens with scopes: ``--token-file FILE`` holds one ``TOKEN SCOPE[,SCOPE...]`` per line.

Scopes: ``ingest`` (pushes, telemetry, traces, heartbeats), ``read`` (queries, the UI) and
``admin`` (deletions, fleet-wide trace requests; it includes the other two). A token comes as
``Authorization: Bearer TOKEN`` or as the password of HTTP basic auth (how Pyroscope SDKs
and Grafana Alloy send it). No token or an unknown one is 401, a known token without the
scope 403. The file is read again when it changes, so tokens rotate without a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import time
from pathlib import Path

from aiflame.errors import AiflameError
from aiflame.server.errors import Forbidden, Unauthorized

SCOPES = ("ingest", "read", "admin")
_RECHECK_S = 2.0


def _digest(token: str) -> bytes:
    # Tokens are looked up by digest: a dict probe on a digest says nothing about the token.
    return hashlib.sha256(token.encode()).digest()


def parse_token_file(path: str) -> dict[bytes, frozenset[str]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise AiflameError(f"{path}: cannot read the token file ({e})") from None
    tokens: dict[bytes, frozenset[str]] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise AiflameError(f"{path}:{n}: expected 'TOKEN SCOPE[,SCOPE...]'")
        token, scopes = parts
        names = frozenset(s for s in scopes.split(",") if s)
        unknown = names - set(SCOPES)
        if unknown or not names:
            raise AiflameError(
                f"{path}:{n}: unknown scope {', '.join(sorted(unknown)) or '(none)'} "
                f"(scopes: {', '.join(SCOPES)})"
            )
        if len(token) < 16:
            raise AiflameError(f"{path}:{n}: a token must have at least 16 characters")
        if "admin" in names:
            names = frozenset(SCOPES)
        tokens[_digest(token)] = names
    if not tokens:
        raise AiflameError(f"{path}: no token in the token file")
    return tokens


def presented_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header (Bearer, or Basic's password)."""
    if not authorization:
        return None
    kind, _, rest = authorization.strip().partition(" ")
    kind = kind.lower()
    if kind == "bearer":
        return rest.strip() or None
    if kind == "basic":
        try:
            decoded = base64.b64decode(rest.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, sep, password = decoded.partition(":")
        return password if sep and password else None
    return None


class TokenCheck:
    """Answers whether a request's ``Authorization`` header grants a scope."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.tokens: dict[bytes, frozenset[str]] = parse_token_file(path) if path else {}
        self._mtime = self._stat()
        self._checked = time.monotonic()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def _stat(self) -> float:
        try:
            return os.stat(self.path).st_mtime if self.path else 0.0
        except OSError:
            return 0.0

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        if now - self._checked < _RECHECK_S:
            return
        self._checked = now
        mtime = self._stat()
        if mtime != self._mtime:
            try:
                self.tokens = parse_token_file(self.path)  # type: ignore[arg-type]
                self._mtime = mtime
            except AiflameError:
                pass  # a half-written file: keep the tokens we have, look again later

    def require(self, authorization: str | None, scope: str) -> None:
        if not self.enabled:
            return
        self._reload_if_changed()
        token = presented_token(authorization)
        if token is None:
            raise Unauthorized("a token is required (Authorization: Bearer TOKEN)")
        scopes = self.tokens.get(_digest(token))
        if scopes is None:
            raise Unauthorized("unknown token")
        if scope not in scopes:
            raise Forbidden(f"this token has no '{scope}' scope")
