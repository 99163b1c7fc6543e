"""Addresses and Host headers as the endpoint's options and requests give
them: `parse_address` (--metrics), `parse_host` (--metrics-host, a request's
Host), and loopback tests that treat an IPv4-mapped IPv6 address as IPv4."""

from __future__ import annotations

import ipaddress
import re


def plain(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, an IPv4-mapped IPv6 one as IPv4."""
    ip = ipaddress.ip_address(addr.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_address(text: str) -> bool:
    """Whether text is an IP address (not a name)."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def is_loopback(addr: str) -> bool:
    """Whether the address is a loopback one (IPv4-mapped included)."""
    return plain(addr).is_loopback


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' or '[IPV6]:PORT' as (host, port); port 0 takes a free
    one. ValueError says what is wrong."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r}: give ADDRESS:PORT, e.g. 127.0.0.1:9466")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: put an IPv6 address in brackets, e.g. [::1]:9466")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port is a number from 0 to 65535")
    if not host or any(c.isspace() or c == "/" for c in host):
        raise ValueError(f"{text!r}: not an address")
    return host, int(port_text)


HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
LOCALHOST = "localhost"


def parse_host(text: str) -> tuple[str, int | None]:
    """'NAME', 'NAME:PORT', an IP address, or '[IPV6]' with or without
    ':PORT' (a Host header's forms) as (name lowercased or the address in
    its normal form, port or None). ValueError says what is wrong."""
    rest = text.strip().lower()
    port: int | None = None
    if rest.startswith("["):
        address, bracket, tail = rest[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:9466")
        rest, port_text = address, tail[1:] if tail else None
    elif rest.count(":") == 1:
        rest, _, port_text = rest.partition(":")
    elif ":" in rest:
        raise ValueError(f"{text!r}: put an IPv6 address in brackets, e.g. [::1]:9466")
    else:
        port_text = None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
            raise ValueError(f"{text!r}: the port is a number from 1 to 65535")
        port = int(port_text)
    try:
        return str(ipaddress.ip_address(rest)), port
    except ValueError:
        pass
    if text.strip().startswith("[") or len(rest) > 253 or not HOST_NAME.fullmatch(rest):
        raise ValueError(f"{text!r}: not a host name or an IP address")
    return rest, port
