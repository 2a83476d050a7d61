#!/usr/bin/env python3
"""The etcdctl subcommands deploy/etcd-peer-roles.sh runs, over etcd's JSON gateway: the tests'
stand-in for etcdctl (Debian's etcd-server package ships none), so that they set etcd up with
the very script a deployment runs. Reads etcdctl's environment: ETCDCTL_ENDPOINTS (one
host:port or URL), ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY. Exits 1 with etcd's answer when a
call fails, 2 on a subcommand it does not know.

  role add ROLE
  role grant-permission ROLE read|write|readwrite [--prefix=true] KEY
  user add USER --interactive=false     (the password on stdin, as etcdctl reads it)
  user grant-role USER ROLE
"""
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request


def b64(text):
    return base64.b64encode(text.encode()).decode()


def call(path, body):
    endpoint = os.environ["ETCDCTL_ENDPOINTS"].split(",")[0]
    context = None
    if os.environ.get("ETCDCTL_CACERT"):
        context = ssl.create_default_context(cafile=os.environ["ETCDCTL_CACERT"])
        if os.environ.get("ETCDCTL_CERT"):
            context.load_cert_chain(os.environ["ETCDCTL_CERT"], os.environ["ETCDCTL_KEY"])
    url = endpoint if "://" in endpoint else f"{'https' if context else 'http'}://{endpoint}"
    request = urllib.request.Request(f"{url}/v3/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            response.read()
    except urllib.error.HTTPError as e:
        sys.exit(f"etcdctl {path}: HTTP {e.code}: {e.read()[:500]!r}")


def main(args):
    flags = {a for a in args if a.startswith("--")}
    words = [a for a in args if not a.startswith("--")]
    match words:
        case ["role", "add", role]:
            call("auth/role/add", {"name": role})
        case ["role", "grant-permission", role, kind, key]:
            perm = {"permType": kind.upper(), "key": b64(key)}
            if "--prefix=true" in flags:
                perm["range_end"] = b64(key[:-1] + chr(ord(key[-1]) + 1))
            call("auth/role/grant", {"name": role, "perm": perm})
        case ["user", "add", user] if "--interactive=false" in flags:
            password = sys.stdin.read().split()[0]
            call("auth/user/add", {"name": user, "password": password})
        case ["user", "grant-role", user, role]:
            call("auth/user/grant", {"user": user, "role": role})
        case _:
            sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
