#!/usr/bin/env python3
"""(Re)generate the CHEQ interop fixtures in tests/fixtures/interop/ with joserfc.

Usage: python3 tests/interop/make_fixtures.py

Keys are created once (OKPKey.generate_key) and reused when their files exist; the
payload is fixed and Ed25519 is deterministic, so re-running is byte-stable. Signing is
done by joserfc (jws.serialize_json, General JSON Serialization) with a registry that
understands the CHEQ headers, `cheq_decision` included as a critical header.
"""

import base64
import hashlib
import json
import os
import sys

from joserfc import jws
from joserfc.jwk import KeySet, OKPKey

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verify import cheq_registry, verify  # noqa: E402  (also silences joserfc's EdDSA warning)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "interop")


def b64u(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def pretty(obj):
    return (json.dumps(obj, indent=2) + "\n").encode("utf-8")


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def load_or_make_key(prefix, kid):
    path = os.path.join(OUT, f"{prefix}.private.json")
    if os.path.exists(path):
        with open(path, "rb") as f:
            key = OKPKey.import_key(json.load(f))
        assert key.kid == kid, f"{path}: kid is {key.kid!r}, expected {kid!r}"
    else:
        key = OKPKey.generate_key("Ed25519", parameters={"kid": kid})
    write(f"{prefix}.private.json", pretty(key.as_dict(private=True)))
    write(f"{prefix}.public.json", pretty(key.as_dict(private=False)))
    return key


def main():
    os.makedirs(OUT, exist_ok=True)
    rs = load_or_make_key("rs", "interop-rs-1")
    cs = load_or_make_key("cs", "interop-cs-1")

    payload = compact({
        "version": "1.0",
        "operation": "https://api.airline.example/api/v1/book-flight",
        "operation name": "Book flight",
        "inputs": {"parameters": [
            {"parameter name": "flight number",
             "parameter description": "The overnight flight from EWR to MAD",
             "parameter value": "UA23"},
            {"parameter name": "flight date", "parameter value": "2026-12-01"},
            {"parameter name": "price", "parameter value": "USD 1234.00"},
        ]},
        "date": "2026-11-22T09:00:00Z",
        "nonce": b64u(hashlib.sha256(b"cheq interop nonce").digest()[:16]),
        "resource uri": "https://api.airline.example/cheq/confirmations/"
                        + b64u(hashlib.sha256(b"cheq interop resource").digest()[:16]),
        "confirmation uri": "https://confirm.example",
        "subject": "alice",
        "expires": "2026-11-22T21:00:00Z",
        "language": "en",
    })
    write("payload.json", payload)  # exact payload bytes, no trailing newline

    registry = cheq_registry()
    keys = KeySet([rs, cs])  # joserfc picks the signing key by the header's kid
    rs_header = {"alg": "EdDSA", "kid": "interop-rs-1", "typ": "cheq+jws", "cheq_role": "resource"}
    resource_signed = jws.serialize_json([{"protected": rs_header}], payload, keys, registry=registry)
    write("resource_signed.json", compact(resource_signed))
    rs_sig = resource_signed["signatures"][0]["signature"]
    rs_sig_raw = base64.urlsafe_b64decode(rs_sig + "=" * (-len(rs_sig) % 4))

    for decision in ("accept", "reject"):
        cs_header = {
            "alg": "EdDSA", "kid": "interop-cs-1", "typ": "cheq+jws",
            "cheq_role": "confirmation",
            "crit": ["cheq_decision"],
            "cheq_decision": decision,
            "sub": "alice",
            "iat": 1795341600,        # 2026-11-22T10:00:00Z
            "auth_time": 1795340600,  # 2026-11-22T09:43:20Z
            "amr": ["pwd"],
            "cheq_channel": "html",
            "cheq_view": b64u(hashlib.sha256("interop view".encode("utf-8")).digest()),
            "cheq_rs_sig": b64u(hashlib.sha256(rs_sig_raw).digest()),
        }
        decided = jws.serialize_json(
            [{"protected": rs_header}, {"protected": cs_header}], payload, keys, registry=registry)
        assert decided["signatures"][0] == resource_signed["signatures"][0], "Ed25519 not deterministic?"
        write(f"decided_{decision}.json", compact(decided))

    write("trust.json", pretty({
        "resource_servers": [{"origin": "https://api.airline.example",
                              "keys": {"keys": [rs.as_dict(private=False)]}}],
        "confirmation_servers": [{"origin": "https://confirm.example",
                                  "keys": {"keys": [cs.as_dict(private=False)]}}],
    }))

    public = KeySet([OKPKey.import_key(rs.as_dict(private=False)), OKPKey.import_key(cs.as_dict(private=False))])
    for name in ("resource_signed.json", "decided_accept.json", "decided_reject.json"):
        with open(os.path.join(OUT, name), "rb") as f:
            verify(f.read(), public)
    print(f"fixtures written to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
