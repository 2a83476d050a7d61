"""A token per role for the tests of roles and members (docs/security.md, "Roles"): token files
`<who>.token` holding `secret-of-<who>`, and the node config lines that give each its role."""


def make_tokens(tmp_path, names):
    """A folder with `<name>.token` for each of `names`."""
    d = tmp_path / "tokens"
    d.mkdir()
    for who in names:
        (d / f"{who}.token").write_text(f"secret-of-{who}\n")
    return d


def auth(tokens, members):
    """Node config lines: reader.token reads, each of `members` is a member, admin.token an admin."""
    return ["auth_tokens:", f"  reader: {tokens}/reader.token",
            "  member: [" + ", ".join(f"{tokens}/{m}.token" for m in members) + "]",
            f"  admin: {tokens}/admin.token"]
