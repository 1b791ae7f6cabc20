"""A webhook's POST to exactly the address its URL policy check passed (DNS rebinding).

The check resolves the URL's host once (project/webhooks.py `WebhookTarget`); if the POST let
httpx connect by name, the system would resolve it again, and a name may answer a public address
to the check and 127.0.0.1 or 169.254.169.254 to the connect. So the request's URL carries the
checked address instead of the name, while what the receiver sees stays the name's: the `Host`
header (set from the URL before the address replaces it), and for https the TLS server name
(httpcore's `sni_hostname` extension), against which the certificate is verified too.

httpcore pools connections by scheme, address and port only, so a kept-alive TLS connection
verified for one name could carry a POST for another name on the same address. The webhook
client therefore keeps no connection alive (`webhook_client`): each POST connects and verifies
anew, one handshake per delivery attempt. Nor does it take a proxy from the environment
(`HTTPS_PROXY`, ...): a proxy would resolve the name itself, and verify TLS against the address.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import httpx

from project.webhooks import WebhookRefused, WebhookTarget

__all__ = ["pinned_post", "webhook_client"]


def webhook_client(
    timeout: httpx.Timeout, concurrency: int, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncClient:
    """The client webhook POSTs go through: no redirects (a redirect's target was never
    checked), no kept-alive connections and no proxy (see above). `verify`: the system's CAs
    (or `SSL_CERT_FILE`'s) unless a test gives its own."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    # a transport of its own: the client then takes no proxy from the environment
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    return httpx.AsyncClient(transport=transport, timeout=timeout, follow_redirects=False)


def pinned_post(
    client: httpx.AsyncClient, target: WebhookTarget, content: bytes, headers: Mapping[str, str]
) -> httpx.Request:
    """The POST of `content` to `target.url`, connecting to `target.address` only.

    Raises:
        WebhookRefused: httpx reads another host in the URL than the policy did, so the
            name the receiver would see is not the one checked.
    """
    request = client.build_request("POST", target.url, content=content, headers=headers)
    name = request.url.raw_host.decode("ascii")  # IDNA-encoded, as the certificate names it
    if name.lower() != _ascii(target.host):  # two URL parsers may disagree on odd URLs
        raise WebhookRefused(
            f"Webhook host blocked: the URL's host reads as {name!r} to the HTTP client and"
            f" {target.host!r} to the policy"
        )
    request.url = request.url.copy_with(host=str(target.address))  # Host: stays the name's
    if request.url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": name}
    return request


def _ascii(host: str) -> str:
    """`host` as the resolver looked it up (Python's IDNA codec, as `getaddrinfo` encodes it);
    empty when it has no such form."""
    try:
        return host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return ""
