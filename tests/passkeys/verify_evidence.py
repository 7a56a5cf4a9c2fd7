"""Checks the passkey assertion of a passkey-bound decision (PROTOCOL.md
§14) with an implementation cheq did not write: Duo's py_webauthn. Reads the
two-signature document (the evidence of /history/{id}.json) from the file
argv[1]; computes the challenge itself from the confirmation header
(cheq_rs_sig, cheq_view, the decision, cheq_collected in RFC 8785 form);
takes the origin and RP ID from the payload's `confirmation uri`; converts
the credential's JWK to a COSE key. Prints {"verified": true, ...} and exits
0, or prints the failure and exits 1.
"""

import base64
import hashlib
import json
import sys
from urllib.parse import urlsplit

import cbor2
from webauthn import verify_authentication_response


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jcs(obj):
    # RFC 8785 for an object of strings: members sorted by UTF-16 code units.
    items = sorted(obj.items(), key=lambda kv: kv[0].encode("utf-16-be"))
    return "{" + ",".join(
        json.dumps(k, ensure_ascii=False) + ":" + json.dumps(v, ensure_ascii=False) for k, v in items
    ) + "}"


def cose_of(jwk):
    if jwk["kty"] == "EC" and jwk["crv"] == "P-256":
        return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: b64d(jwk["x"]), -3: b64d(jwk["y"])})
    if jwk["kty"] == "OKP" and jwk["crv"] == "Ed25519":
        return cbor2.dumps({1: 1, 3: -8, -1: 6, -2: b64d(jwk["x"])})
    if jwk["kty"] == "RSA":
        return cbor2.dumps({1: 3, 3: -257, -1: b64d(jwk["n"]), -2: b64d(jwk["e"])})
    raise ValueError(f"unsupported key {jwk}")


def main():
    doc = json.load(open(sys.argv[1]))
    payload = json.loads(b64d(doc["payload"]))
    header = json.loads(b64d(doc["signatures"][1]["protected"]))
    assert "cheq_passkey" in header.get("crit", []), "cheq_passkey is critical"
    pk = header["cheq_passkey"]
    collected = header.get("cheq_collected")
    collected_digest = hashlib.sha256(jcs(collected).encode()).digest() if collected else bytes(32)
    challenge = hashlib.sha256(
        b"CHEQ passkey v1\x00"
        + b64d(header["cheq_rs_sig"])
        + b64d(header["cheq_view"])
        + header["cheq_decision"].encode()
        + collected_digest
    ).digest()
    uri = urlsplit(payload["confirmation uri"])
    origin = f"{uri.scheme}://{uri.netloc}"
    verified = verify_authentication_response(
        credential={
            "id": pk["id"],
            "rawId": pk["id"],
            "type": "public-key",
            "response": {
                "clientDataJSON": pk["client_data"],
                "authenticatorData": pk["authenticator_data"],
                "signature": pk["signature"],
            },
        },
        expected_challenge=challenge,
        expected_rp_id=uri.hostname,
        expected_origin=origin,
        credential_public_key=cose_of(pk["key"]),
        credential_current_sign_count=0,
        require_user_verification=True,
    )
    print(json.dumps({"verified": True, "sign_count": verified.new_sign_count, "rp_id": uri.hostname}))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - reported to the test
        print(json.dumps({"verified": False, "error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
