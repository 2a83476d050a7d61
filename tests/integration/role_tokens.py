"""Token files per role for daemons with `auth_tokens` (docs/security.md#roles): each holder
`who` has the token "secret-of-<who>" in `<who>.token`, so that its identity on a daemon is
`token:<role>:<who>.token`."""


def write_tokens(folder, holders):
    """`folder` (created) with one token file per holder."""
    folder.mkdir()
    for who in holders:
        (folder / f"{who}.token").write_text(f"secret-of-{who}\n")
    return folder


def auth(tokens, members):
    """Node config lines: reader.token reads, each of `members` is a member token, admin.token administers."""
    return ["auth_tokens:", f"  reader: {tokens}/reader.token",
            "  member: [" + ", ".join(f"{tokens}/{m}.token" for m in members) + "]",
            f"  admin: {tokens}/admin.token"]
