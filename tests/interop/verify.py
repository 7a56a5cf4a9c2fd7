#!/usr/bin/env python3
"""Verify a signed CHEQ (JWS General JSON Serialization) with joserfc.

Usage:
    python3 tests/interop/verify.py --jwks KEYS.json [--jwks MORE.json ...] SIGNED.json|-

Independent cross-check of the Rust implementation (PROTOCOL.md §5), JOSE level only:
every entry of `signatures` must verify with the configured key named by its `kid`
(joserfc KeySet lookup), with alg EdDSA only, `cheq_decision` understood as a critical
header, and none of jwk/jku/x5u/x5c, `b64: false`, an unprotected `header`, duplicate
member names or non-canonical base64url. CHEQ semantics (trust per origin, order of
roles, cheq_rs_sig, expiry, nonce replay) are NOT checked here.

Prints {"ok":true,"signatures":[{"kid":..,"cheq_role":..,"cheq_decision":..}]} and exits 0
when all signatures verify; prints a reason to stderr and exits 1 otherwise; exit 2 on
usage errors (including unreadable key files).
"""

import argparse
import base64
import json
import sys
import warnings

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.registry import HeaderParameter, in_choices

# joserfc 1.8 flags EdDSA as "deprecated via RFC 9864" (in favour of "Ed25519"); CHEQ uses EdDSA.
warnings.filterwarnings("ignore", message="EdDSA is deprecated")


def _refuse_false(value):
    if value is not True:
        raise ValueError("must not be false (RFC 7797 unencoded payload is refused)")


def _is_object(value):
    if not isinstance(value, dict):
        raise ValueError("must be an object")


# Header parameters this verifier understands. joserfc treats a name listed in `crit` as
# understood iff it is a key of the registry (registry.check_crit_header), so listing
# cheq_decision here is what makes crit:["cheq_decision"] acceptable.
CHEQ_HEADERS = {
    "cheq_role": HeaderParameter("CHEQ signature role", in_choices(["resource", "confirmation"])),
    "cheq_decision": HeaderParameter("CHEQ decision", in_choices(["accept", "reject"])),
    "sub": HeaderParameter("User id at the CS", "str"),
    "iat": HeaderParameter("Decision time", "int"),
    "auth_time": HeaderParameter("User authentication time", "int"),
    "amr": HeaderParameter("Authentication methods", "list[str]"),
    "cheq_channel": HeaderParameter("CHEQ channel", in_choices(["html", "voice", "api"])),
    "cheq_view": HeaderParameter("SHA-256 of the text shown", "str"),
    "cheq_rs_sig": HeaderParameter("SHA-256 of the resource signature", "str"),
    "cheq_collected": HeaderParameter("Values the user supplied", _is_object),
    # §5: keys come only from configured trust; b64:false is refused.
    "jwk": HeaderParameter("JSON Web Key", "none"),
    "jku": HeaderParameter("JWK Set URL", "none"),
    "x5u": HeaderParameter("X.509 URL", "none"),
    "x5c": HeaderParameter("X.509 Certificate Chain", "none"),
    "b64": HeaderParameter("JWS Signing Input Formula", _refuse_false),
}


def cheq_registry():
    """A joserfc JWSRegistry for CHEQ: EdDSA only, CHEQ headers known (crit-able).

    strict_check_header=False: unknown non-critical headers are ignored (RFC 7515 §4);
    an unknown name in `crit` is still refused by joserfc.
    """
    registry = jws.JWSRegistry(header_registry=CHEQ_HEADERS, algorithms=["EdDSA"], strict_check_header=False)
    registry.max_header_length = 64 * 1024  # default 512 is too small for a confirmation header
    return registry


class Invalid(Exception):
    pass


def _strict_loads(data):
    """json.loads that refuses duplicate member names at any depth."""

    def hook(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                raise Invalid(f"duplicate member name {k!r}")
            obj[k] = v
        return obj

    return json.loads(data, object_pairs_hook=hook)


def _b64(seg, what):
    """Decode canonical unpadded base64url (joserfc accepts non-canonical trailing bits)."""
    if not isinstance(seg, str):
        raise Invalid(f"{what} is not a string")
    try:
        raw = base64.urlsafe_b64decode(seg + "=" * (-len(seg) % 4))
    except ValueError as e:
        raise Invalid(f"{what}: bad base64url") from e
    if "=" in seg or base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != seg:
        raise Invalid(f"{what}: not canonical unpadded base64url")
    return raw


def load_keys(paths):
    keys = []
    for path in paths:
        with open(path, "rb") as f:
            data = json.load(f)
        keys.extend(data["keys"] if "keys" in data else [data])
    return KeySet.import_key_set({"keys": keys})


def verify(doc_bytes, keyset):
    """Return the per-signature summary, or raise Invalid / JoseError."""
    try:
        doc = _strict_loads(doc_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise Invalid(f"not UTF-8 JSON: {e}") from e
    if not isinstance(doc, dict) or set(doc) != {"payload", "signatures"}:
        raise Invalid("document must be an object with exactly 'payload' and 'signatures'")
    sigs = doc["signatures"]
    if not isinstance(sigs, list) or not sigs:
        raise Invalid("'signatures' must be a non-empty array")
    payload = _b64(doc["payload"], "payload")
    try:
        if not isinstance(_strict_loads(payload.decode("utf-8")), dict):
            raise Invalid("payload is not a JSON object")
    except (UnicodeDecodeError, ValueError) as e:
        raise Invalid(f"payload is not UTF-8 JSON: {e}") from e

    registry = cheq_registry()
    summary = []
    for i, sig in enumerate(sigs):
        if not isinstance(sig, dict) or set(sig) != {"protected", "signature"}:
            raise Invalid(f"signature {i}: must have exactly 'protected' and 'signature' (no 'header')")
        header = _strict_loads(_b64(sig["protected"], f"signature {i} protected").decode("utf-8"))
        _b64(sig["signature"], f"signature {i} signature")
        if not isinstance(header, dict) or not isinstance(header.get("kid"), str):
            raise Invalid(f"signature {i}: protected header lacks a string 'kid'")
        # Each signature on its own, as a flattened JWS, so the failing index is known.
        flat = {"payload": doc["payload"], "protected": sig["protected"], "signature": sig["signature"]}
        try:
            jws.deserialize_json(flat, keyset, registry=registry)
        except (JoseError, ValueError) as e:
            raise Invalid(f"signature {i} (kid {header['kid']!r}): {type(e).__name__}: {e}") from e
        summary.append({k: header.get(k) for k in ("kid", "cheq_role", "cheq_decision")})

    # And the whole General JSON document at once: joserfc requires every signature to verify.
    jws.deserialize_json(doc, keyset, registry=registry)
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jwks", action="append", required=True, help="JWK or JWK Set file (repeatable)")
    ap.add_argument("signed", help="signed CHEQ file, or - for stdin")
    args = ap.parse_args()
    try:
        keyset = load_keys(args.jwks)
        if args.signed == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.signed, "rb") as f:
                data = f.read()
    except (OSError, ValueError, KeyError, TypeError, JoseError) as e:
        print(f"usage error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    try:
        summary = verify(data, keyset)
    except (Invalid, JoseError, ValueError, KeyError, TypeError) as e:
        print(f"invalid: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"ok": True, "signatures": summary}, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
