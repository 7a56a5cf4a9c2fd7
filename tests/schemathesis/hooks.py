"""Schemathesis hooks for scripts/schemathesis: real confirmations among the
random ones, so that the decisive operations of the raw API (PROTOCOL.md §10)
get real coverage and not only refusals.

Random data alone never names a resource URI the CS knows (it must belong to
a registered resource server and be known there, §2, §3), so POST
/api/v1/confirmations would only ever answer 400, and GET and the decision
only 404. scripts/schemathesis makes real CHEQs at the demo resource server
and opens them over the API before the run; their resource URIs, ids and
`voice.digest`s come in CHEQ_ST_REAL (a JSON list of
{"resource uri", "id", "digest"}). Every third generated case of each of the
three operations is then pointed at one of them (in turn), keeping the rest of
what schemathesis generated: the views of 201 and 200, decided views, the
answer of a decision and its 409 and 422 refusals are all met and checked
against the description.
"""

import json
import os
from collections import defaultdict

import schemathesis

REAL = json.loads(os.environ.get("CHEQ_ST_REAL", "[]"))
_seen = defaultdict(int)


def _turn(key):
    """Every third case of `key`: the index of the real confirmation to use."""
    _seen[key] += 1
    n = _seen[key]
    if not REAL or n % 3:
        return None
    return REAL[(n // 3) % len(REAL)]


@schemathesis.hook
def map_case(context, case):
    op = context.operation
    if op is None:
        return case
    key = (op.method.upper(), op.path)
    if key == ("POST", "/api/v1/confirmations"):
        real = _turn(key)
        if real is not None and isinstance(case.body, dict):
            case.body = {**case.body, "resource uri": real["resource uri"]}
    elif key == ("GET", "/api/v1/confirmations/{id}"):
        real = _turn(key)
        if real is not None:
            case.path_parameters = {**(case.path_parameters or {}), "id": real["id"]}
    elif key == ("POST", "/api/v1/confirmations/{id}/decision"):
        real = _turn(key)
        if real is not None:
            case.path_parameters = {**(case.path_parameters or {}), "id": real["id"]}
            if isinstance(case.body, dict):
                case.body = {**case.body, "view": real["digest"]}
    return case
