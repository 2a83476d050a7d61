"""Who this process is to the daemons: TLS files and the token (docs/security.md)."""
from __future__ import annotations

import os
from typing import Union

from . import _native

PathLike = Union[str, "os.PathLike[str]", None]


def set_credentials(*, tls_ca: PathLike = None, tls_cert: PathLike = None, tls_key: PathLike = None,
                    token_file: PathLike = None) -> None:
    """Use these files for every call this process makes to a daemon, as ``metactl``'s
    ``--tls-ca``, ``--tls-cert``, ``--tls-key`` and ``--token-file`` do (all keyword-only). One
    left ``None`` is taken from its variable (``METALOAD_TLS_CA``, ``METALOAD_TLS_CERT``,
    ``METALOAD_TLS_KEY``, ``METALOAD_TOKEN_FILE``); without this call, the variables alone are used.

    ``tls_ca`` turns TLS on and verifies the daemon's certificate; ``tls_cert`` and ``tls_key``
    (both or neither) are this client's certificate where the daemon requires one (mutual TLS);
    ``token_file`` holds the token every call carries. The files are read now: a missing,
    unreadable or malformed one raises BadInputError naming the argument and the path (never the
    token). Call it before ``load`` or ``materialize``; a later call replaces the credentials.

    Example::

        metaload.set_credentials(tls_ca="/etc/metaload/ca.pem", token_file="/run/secrets/metaload-token")
        tensors = metaload.load("llama-8b", daemon="node-a:7070")
    """
    def text(path: PathLike) -> str:
        return "" if path is None else os.fspath(path)

    _native.set_credentials(tls_ca=text(tls_ca), tls_cert=text(tls_cert), tls_key=text(tls_key),
                            token_file=text(token_file))
