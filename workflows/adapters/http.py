"""A small shared aiohttp helper for the REST adapters: one session, timeouts, error mapping.

4xx answers other than 408/409/429 are ``AdapterRejected`` (retrying cannot help); 5xx,
408, 429 and connection errors are ``AdapterError`` (the activity's retry policy retries).
Credentials go in the session's auth and never into a message or log line.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from workflows.adapters.base import AdapterError, AdapterRejected

_RETRYABLE_4XX = {408, 409, 429}


class RestClient:
    def __init__(self, base_url: str, *, basic_auth: tuple[str, str] | None = None,
                 headers: dict[str, str] | None = None, timeout_s: float = 30.0,
                 verify_tls: bool = True) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers or {})
        if basic_auth is not None:
            # a default session header, not part of any URL or message
            self._headers["Authorization"] = aiohttp.encode_basic_auth(*basic_auth)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._verify_tls = verify_tls
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=self._verify_tls))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, path: str, *, json_body: Any = None,
                      headers: dict[str, str] | None = None) -> Any:
        url = f"{self.base_url}{path}"
        try:
            async with self._get_session().request(method, url, json=json_body,
                                                   headers=headers) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    # the body is the product's error text; the URL carries no credentials
                    msg = f"{method} {path}: HTTP {resp.status}: {text[:300]}"
                    if resp.status < 500 and resp.status not in _RETRYABLE_4XX:
                        raise AdapterRejected(msg)
                    raise AdapterError(msg)
                if not text.strip():
                    return None
                try:
                    return await resp.json(content_type=None)
                except ValueError:
                    return text
        except aiohttp.ClientError as exc:
            raise AdapterError(f"{method} {path}: {type(exc).__name__}: {exc}") from None
