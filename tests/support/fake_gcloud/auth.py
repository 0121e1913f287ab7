"""``gcloud auth list [--filter=status:ACTIVE] [--format=json|value(account)]``: the state's
``accounts`` (one active account unless a test changes them), as gcloud prints them."""

from __future__ import annotations

import json
import sys

from .errors import Usage
from .state import load_state


def auth_list(folder: str, positional: list, flags: dict) -> int:
    """``gcloud auth list``: the credentialed accounts, in gcloud's three usual formats."""
    if positional or set(flags) - {"filter", "format"}:
        raise Usage(f"auth list takes --filter and --format only: {positional} {flags}")
    accounts = load_state(folder)["accounts"]
    if flags.get("filter") == "status:ACTIVE":
        accounts = [a for a in accounts if a["status"] == "ACTIVE"]
    elif "filter" in flags:
        raise Usage(f"this fake filters on status:ACTIVE only: {flags['filter']}")
    fmt = flags.get("format", "")
    if fmt == "json":
        print(json.dumps(accounts, indent=2))
    elif fmt == "value(account)":
        for a in accounts:
            print(a["account"])
    elif fmt:
        raise Usage(f"this fake prints auth list as json or value(account) only: {fmt}")
    elif accounts:
        print("Credentialed Accounts\nACTIVE  ACCOUNT")
        for a in accounts:
            print(f"{'*' if a['status'] == 'ACTIVE' else ' ':8}{a['account']}")
    if not accounts:
        sys.stderr.write(
            "No credentialed accounts.\n\nTo login, run:\n  $ gcloud auth login `ACCOUNT`\n"
        )
    return 0
