"""The `webhooks` key of `langgraph.json` and LangGraph's URL policy for a run's `webhook`.

As LangGraph's server reads them (`langgraph_api/config/schemas.py` `WebhooksConfig`,
`langgraph_api/webhook.py` `validate_webhook_url_or_raise`): `url` (the policy a webhook URL
must pass, at submit and again before each POST), `headers` (sent with every POST; a value may
name an environment variable as `${{ env.LG_WEBHOOK_X }}`, resolved once at start, only with
the `env_prefix`), `allowed_fields` (the payload keys sent), `env_prefix`.

One difference, on purpose: whether a webhook may reach a loopback or private address is the
operator's (`RUNSTREAM_WEBHOOK_PRIVATE_ADDRESSES`), not the project file's. Without it both are
refused; with it they are allowed unless the project says `disable_loopback: true` or
`disable_private_ips: true` itself (docs/langgraph.md, "Webhooks").

A check answers the addresses it passed (`WebhookTarget`), so the POST connects to exactly those
rather than asking DNS again (a name may answer a public address to the check and 127.0.0.1 to
the connect: DNS rebinding). The resolver is the policy's (`Resolver`), so tests give their own.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from .errors import ProjectContractError

__all__ = [
    "PAYLOAD_FIELDS",
    "Address",
    "Resolver",
    "WebhookPolicy",
    "WebhookRefused",
    "WebhookTarget",
    "WebhookUnresolved",
    "WebhookUrlSpec",
    "WebhooksSpec",
    "resolve_headers",
    "resolve_host",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# A host's addresses for a port (what `loop.getaddrinfo` answers); raises WebhookUnresolved.
Resolver = Callable[[str, int], Awaitable[list[Address]]]

# The payload keys `allowed_fields` may name (LangGraph's `VALID_WEBHOOK_ALLOWED_FIELDS`).
PAYLOAD_FIELDS = frozenset(
    {
        "run_id",
        "thread_id",
        "assistant_id",
        "created_at",
        "updated_at",
        "metadata",
        "kwargs",
        "multitask_strategy",
        "status",
        "run_started_at",
        "run_ended_at",
        "webhook_sent_at",
        "values",
        "error",
    }
)
_TEMPLATE = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")
_DNS_TIMEOUT_S = 5.0

# Never a webhook's target, whatever the settings (LangGraph's `_ALWAYS_BLOCKED_*`).
_ALWAYS_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",
        "0.0.0.0/8",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
        "fe80::/10",
        "fec0::/10",  # site-local, deprecated
        "ff00::/8",
        "64:ff9b::/96",  # NAT64: whatever IPv4 address it embeds (as LangGraph blocks it)
        "64:ff9b:1::/48",
    )
)
_PRIVATE = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
_METADATA_IPS = frozenset({"169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"})
_METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata.amazonaws.com", "metadata", "instance-data"}
)
_LOCALHOST_NAMES = frozenset({"localhost", "localhost.localdomain", "host.docker.internal"})
_K8S_SUFFIX = ".svc.cluster.local"


class WebhookRefused(ProjectContractError, ValueError):
    """The URL does not pass the policy; the message says why (LangGraph's `detail`)."""


class WebhookUnresolved(WebhookRefused):
    """The host's name did not resolve (or not in time): refused at submit, as LangGraph does;
    at delivery a failure worth another attempt, as a failed connect is."""


@dataclass(frozen=True)
class WebhookTarget:
    """A URL that passed the policy, and the addresses its host had then: the POST connects to
    `address` and to nothing else."""

    url: str
    host: str  # lowercased, as the policy read it
    addresses: tuple[Address, ...]

    @property
    def address(self) -> Address:
        """The one the POST connects to: the resolver's first (its preferred order)."""
        return self.addresses[0]


class WebhookUrlSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`webhooks.url`, with the defaults LangGraph gives a `url` block that is present."""

    require_https: bool = True
    allowed_domains: list[Annotated[str, msgspec.Meta(min_length=1)]] = []
    allowed_ports: list[Annotated[int, msgspec.Meta(ge=1, le=65535)]] = []
    max_url_length: Annotated[int, msgspec.Meta(ge=1)] = 2048
    disable_loopback: bool | None = None  # None: the operator's setting decides
    disable_private_ips: bool | None = None


class WebhooksSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`webhooks` as written; `headers` still hold their `${{ env.X }}` templates."""

    env_prefix: str = "LG_WEBHOOK_"
    url: WebhookUrlSpec | None = None
    headers: dict[str, str] = {}
    allowed_fields: list[str] | None = None


def resolve_headers(spec: WebhooksSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """`spec.headers` with each `${{ env.VAR }}` replaced by `environ[VAR]`.

    Raises:
        ValueError: a template is not `env.VAR`, names a variable outside `env_prefix`, or one
            that is not set (as LangGraph refuses them at start).
    """

    def value_of(match: re.Match[str]) -> str:
        expression = match.group(1).strip()
        if not expression.startswith("env."):
            raise ValueError(f"only env.VAR references are allowed, got {expression!r}")
        name = expression[len("env.") :]
        if not name or "." in name:
            raise ValueError(f"invalid env reference {name!r}")
        if spec.env_prefix and not name.startswith(spec.env_prefix):
            raise ValueError(f"{name} must start with the env_prefix {spec.env_prefix!r}")
        if name not in environ:
            raise ValueError(f"the environment variable {name} is not set")
        return environ[name]

    return {key: _TEMPLATE.sub(value_of, value) for key, value in spec.headers.items()}


async def resolve_host(host: str, port: int) -> list[Address]:
    """`host`'s addresses, from the system's resolver without blocking the loop.

    Raises:
        WebhookUnresolved: it did not resolve within _DNS_TIMEOUT_S.
    """
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(_DNS_TIMEOUT_S):
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError):
        raise WebhookUnresolved("Webhook host blocked: DNS resolution failed") from None
    return [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found]


@dataclass(frozen=True)
class WebhookPolicy:
    """What a webhook URL must pass: the project's `webhooks.url` (None: LangGraph's policy
    without a `url` block) and the operator's word on loopback and private addresses."""

    url: WebhookUrlSpec | None = None
    private_addresses: bool = False  # RUNSTREAM_WEBHOOK_PRIVATE_ADDRESSES
    resolve: Resolver = field(default=resolve_host, compare=False)  # tests give their own

    @property
    def max_url_length(self) -> int:
        return self.url.max_url_length if self.url is not None else 4096

    def _blocks_loopback(self) -> bool:
        explicit = self.url.disable_loopback if self.url is not None else None
        return not self.private_addresses or explicit is True

    def _blocks_private(self) -> bool:
        explicit = self.url.disable_private_ips if self.url is not None else None
        return not self.private_addresses or explicit is True

    async def check(self, url: str) -> WebhookTarget:
        """Refuse `url` unless it passes the policy, in LangGraph's order (so a URL failing
        several checks gets LangGraph's reason); resolves its host once (every address it
        resolves to must pass) and answers them.

        Raises:
            WebhookUnresolved: its host did not resolve.
            WebhookRefused: why not.
        """
        if len(url) > self.max_url_length:
            raise WebhookRefused("Webhook URL too long")
        if url.startswith("/"):
            raise WebhookRefused(
                "Loopback webhooks (relative URLs) are not served: give an absolute URL"
            )
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WebhookRefused(f"Invalid webhook URL: {exc}") from None
        scheme = parts.scheme.lower()
        if self.url is not None and self.url.require_https and scheme != "https":
            raise WebhookRefused("Webhook must use https")
        if port is None:
            port = 443 if scheme == "https" else 80
        if self.url is not None and self.url.allowed_ports and port not in self.url.allowed_ports:
            raise WebhookRefused(f"Webhook port {port} not allowed")
        host = (parts.hostname or "").lower()
        if not host:
            raise WebhookRefused(f"Invalid webhook hostname {host!r}")
        if not self._domain_allowed(host):
            raise WebhookRefused("Webhook domain not allowed")
        if scheme not in ("http", "https"):  # LangGraph checks it here, with the addresses
            raise WebhookRefused(f"Webhook host blocked: scheme {scheme!r} not allowed")
        return WebhookTarget(url=url, host=host, addresses=await self._check_host(host, port))

    def _domain_allowed(self, host: str) -> bool:
        domains = [d.strip().lower() for d in (self.url.allowed_domains if self.url else [])]
        if not domains:
            return True
        return any(host.endswith("." + d[2:]) if d.startswith("*.") else host == d for d in domains)

    async def _check_host(self, host: str, port: int) -> tuple[Address, ...]:
        if host in _LOCALHOST_NAMES and self._blocks_loopback():
            raise WebhookRefused("Webhook host blocked: localhost address")
        if host in _METADATA_HOSTS:
            raise WebhookRefused("Webhook host blocked: cloud metadata endpoint")
        if host.endswith(_K8S_SUFFIX):
            raise WebhookRefused("Webhook host blocked: Kubernetes internal DNS")
        try:
            addresses = [ipaddress.ip_address(host)]
        except ValueError:
            addresses = await self.resolve(host, port)
        if not addresses:
            raise WebhookUnresolved("Webhook host blocked: DNS resolution failed")
        for address in addresses:  # any one refused refuses the name: the connect may pick it
            reason = self._blocked(address)
            if reason is not None:
                raise WebhookRefused(f"Webhook host blocked: {reason}")
        return tuple(addresses)

    def _blocked(self, address: Address) -> str | None:
        if isinstance(address, ipaddress.IPv6Address):
            embedded = address.ipv4_mapped or address.sixtofour  # reached as that IPv4 address
            if embedded is not None:
                address = embedded
        if str(address) in _METADATA_IPS:
            return "cloud metadata endpoint"
        if any(address in network for network in _ALWAYS_BLOCKED) or address.is_unspecified:
            return "blocked IP range"
        if address.is_loopback:
            return "loopback IP range" if self._blocks_loopback() else None
        if any(address in network for network in _PRIVATE):
            return "private IP range" if self._blocks_private() else None
        if not address.is_global or address.is_reserved or address.is_multicast:
            return "blocked IP range"  # any other special-purpose range (documentation, ...)
        return None
