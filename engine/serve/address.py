"""Where Logitscope's server listens: this machine by default, and the listening socket bound
before the server starts, so a port in use is a clear error where it was asked for (the
command line's, the app's dialog), not a log line on the server's thread."""

from __future__ import annotations

import ipaddress
import socket

DEFAULT_PORT = 8080
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def is_local(host: str) -> bool:
    """Whether ``host`` answers this machine only (a loopback address)."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: any free one); an ``OSError`` in words
    when it cannot (a port in use, an address this machine does not have)."""
    if not 0 <= port < 65536:
        raise OSError(f"the port must be in [0, 65535], got {port}.")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise OSError(f"{host} is not an address of this machine ({exc.strerror}).") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    return sock
