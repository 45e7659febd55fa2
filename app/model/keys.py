"""API keys for remote servers: read from an environment variable or the OS keychain.

A key is never written to the SQLite file, the settings, logs or exports: the app keeps
it in memory for the connection only. What the settings may remember is *where* the key
comes from (the name of an environment variable, or "keychain"), never the key.
The keychain is ``keyring`` (macOS Keychain, Windows Credential Locker, Secret Service);
where no backend is available (a bare Linux box), :func:`keychain_status` says so and
the environment variable is the way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

SERVICE = "Logitscope"
NONE, ENV, KEYCHAIN = "none", "env", "keychain"


class KeyUnavailable(RuntimeError):
    """The key could not be read (variable unset, keychain missing or locked)."""


@dataclass(frozen=True)
class KeySource:
    """Where a key comes from: ``kind`` is ``none``, ``env`` (``name`` is the variable) or
    ``keychain`` (``name`` is the account, by default the server's host)."""

    kind: str = NONE
    name: str = ""


def account_for(url: str) -> str:
    """The keychain account of a server: its host and port (one key per server)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return parts.netloc or url


def _backend():
    import keyring

    return keyring.get_keyring()


def keychain_status() -> tuple[bool, str]:
    """``(available, words)``: whether an OS keychain backend can hold keys here."""
    try:
        backend = _backend()
    except Exception as exc:  # keyring missing or broken: the env var remains
        return False, f"no OS keychain: {type(exc).__name__}: {exc}"
    priority = getattr(backend, "priority", 0)
    name = type(backend).__module__.removeprefix("keyring.backends.")
    if priority is None or priority <= 0 or name.startswith(("fail", "null")):
        return False, "no OS keychain backend is available on this system: use an environment variable"
    return True, f"OS keychain ({name})"


def read_key(source: KeySource) -> str | None:
    """The key, or None for ``none``; raises :class:`KeyUnavailable` when it cannot be read."""
    if source.kind == NONE:
        return None
    if source.kind == ENV:
        if not source.name:
            raise KeyUnavailable("name the environment variable that holds the API key.")
        value = os.environ.get(source.name)
        if not value:
            raise KeyUnavailable(f"the environment variable {source.name} is not set.")
        return value
    if source.kind == KEYCHAIN:
        ok, words = keychain_status()
        if not ok:
            raise KeyUnavailable(words)
        import keyring

        try:
            value = keyring.get_password(SERVICE, source.name)
        except Exception as exc:
            raise KeyUnavailable(f"the OS keychain refused: {exc}") from exc
        if not value:
            raise KeyUnavailable(f"the OS keychain holds no key for {source.name}.")
        return value
    raise KeyUnavailable(f"unknown key source {source.kind!r}.")


def store_key(account: str, key: str) -> None:
    """Save ``key`` in the OS keychain under ``account``; raises :class:`KeyUnavailable`."""
    ok, words = keychain_status()
    if not ok:
        raise KeyUnavailable(words)
    import keyring

    try:
        keyring.set_password(SERVICE, account, key)
    except Exception as exc:
        raise KeyUnavailable(f"the OS keychain refused: {exc}") from exc
