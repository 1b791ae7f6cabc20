"""Sign-in with JWTs (`RUNSTREAM_JWT_SECRET` or `RUNSTREAM_JWT_JWKS_URL`): no code, for apps
whose users sign in with an identity provider.

`Authorization: Bearer <jwt>`; the token's `sub` is the owner. A secret verifies HS256; a JWKS
URL verifies RS256 and ES256 with the key the token's `kid` names, fetched by PyJWT's
`PyJWKClient` (its keys cached, fetched again for an unknown `kid`). `exp` and `nbf` are always
checked when present; `RUNSTREAM_JWT_ISSUER` / `RUNSTREAM_JWT_AUDIENCE` make `iss` / `aud`
required and checked. A refusal is a 401 saying why; the token is never logged.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import jwt
import structlog
from litestar import Request

from server.errors import ApiError, Unauthorized
from stream_store.settings import Settings

from .auth import Caller, bounded_credential

__all__ = ["JwtSignIn"]

logger = structlog.get_logger()

_HMAC_ALGORITHMS = ["HS256"]
_JWKS_ALGORITHMS = ["RS256", "ES256"]
_LEEWAY_S = 30  # clock skew between the identity provider and this server


class JwtSignIn:
    """Verifies the bearer JWT of each request, and names its `sub` as the caller."""

    description = "JWT (RUNSTREAM_JWT_*)"

    def __init__(self, settings: Settings) -> None:
        self._secret = settings.jwt_secret
        self._jwks = (
            jwt.PyJWKClient(settings.jwt_jwks_url, cache_keys=True, lifespan=300, timeout=10)
            if settings.jwt_jwks_url
            else None
        )
        self._issuer = settings.jwt_issuer
        self._audience = settings.jwt_audience

    async def caller(self, request: Request[Any, Any, Any]) -> Caller:
        """The caller whose token the request carries.

        Raises:
            Unauthorized: no bearer token, or one that does not verify (the message says why).
        """
        header = request.headers.get("authorization") or ""
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("a JWT is required (header Authorization: Bearer <jwt>)")
        return Caller.signed_in(await self.subject(bounded_credential(token)))

    async def subject(self, token: str) -> str:
        """The verified token's `sub`.

        Raises:
            Unauthorized: as `caller`.
        """
        try:
            if self._jwks is not None:
                # A key not cached yet is fetched over HTTP: not on the event loop.
                jwks = self._jwks
                signing_key = await anyio.to_thread.run_sync(
                    lambda: jwks.get_signing_key_from_jwt(token)
                )
                key: Any = signing_key.key
                # The key's own algorithm only: an RS256 token whose `kid` names an EC key is
                # refused by PyJWT (`InvalidAlgorithmError`), not handed an EC key to use as RSA.
                if signing_key.algorithm_name not in _JWKS_ALGORITHMS:
                    raise Unauthorized(
                        f"the JWT's key in the JWKS is for {signing_key.algorithm_name},"
                        f" not one of {', '.join(_JWKS_ALGORITHMS)}"
                    )
                algorithms = [signing_key.algorithm_name]
            else:
                key, algorithms = self._secret, _HMAC_ALGORITHMS
            required = ["sub"]
            required += ["iss"] if self._issuer else []
            required += ["aud"] if self._audience else []
            claims = jwt.decode(
                token,
                key,
                algorithms=algorithms,
                issuer=self._issuer,
                audience=self._audience,
                leeway=_LEEWAY_S,
                options={"require": required, "verify_aud": self._audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the JWT has expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the JWT is not for this audience (aud)") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("the JWT is from another issuer (iss)") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the JWT's signature does not verify") from None
        except jwt.MissingRequiredClaimError as exc:
            raise Unauthorized(f"the JWT has no {exc.claim!r} claim") from None
        except jwt.PyJWKClientConnectionError as exc:
            # The server's trouble, not the caller's: 503, as storage being down is.
            logger.warning("the JWKS cannot be fetched", error=str(exc))
            raise ApiError(
                503, "unavailable", "the identity provider's keys (JWKS) cannot be fetched"
            ) from None
        except jwt.PyJWKClientError as exc:
            raise Unauthorized(f"the JWT's key is not in the JWKS: {exc}") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"invalid JWT: {exc}") from None
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise Unauthorized("the JWT's sub is not a non-empty string")
        return subject
