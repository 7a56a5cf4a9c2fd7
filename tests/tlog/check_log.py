"""Reads a cheq transparency log with aics-tlog alone (a client that knows
nothing of cheq but tlog-tiles and signed notes): verifies the checkpoint
with the given verifier key, rebuilds the root from the tiles, authenticates
every tile and entry bundle, and proves each given entry is in the tree.

usage: check_log.py PREFIX VKEY [ENTRY_LINE...]
Prints one JSON object; exit 0 when every check passes.
"""

import json
import sys
import urllib.request

from aics_tlog import (
    HttpTileReader,
    VerifiedTileReader,
    audit_tiles,
    inclusion_proof_from_tiles,
    parse_checkpoint,
    parse_note,
    parse_vkey,
    read_entry,
    tree_root_from_tiles,
    verify_checkpoint,
    verify_inclusion,
)
from aics_tlog.hashing import leaf_hash


def main() -> int:
    prefix, vkey, *entries = sys.argv[1:]
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    with urllib.request.urlopen(prefix + "checkpoint", timeout=15) as r:
        raw = r.read(65536)
    note = parse_note(raw)
    result = verify_checkpoint(note, parse_vkey(vkey))
    if not result.ok:
        print(json.dumps({"ok": False, "error": "checkpoint: " + str(result.error)}))
        return 1
    cp = parse_checkpoint(note.text)
    reader = HttpTileReader(prefix)
    rebuilt = tree_root_from_tiles(reader, cp.size) if cp.size else None
    if cp.size and rebuilt != cp.root:
        print(json.dumps({"ok": False, "error": "the tiles do not rebuild the root"}))
        return 1
    report = audit_tiles(reader, cp.size, cp.root, entries=True) if cp.size else None
    verified = VerifiedTileReader(reader, cp.size, cp.root)
    found = {}
    for wanted in entries:
        line = (wanted + "\n").encode()
        for i in range(cp.size):
            if read_entry(verified, i, cp.size) == line:
                proof = inclusion_proof_from_tiles(reader, i, cp.size)
                if not verify_inclusion(leaf_hash(line), i, cp.size, proof, cp.root):
                    print(json.dumps({"ok": False, "error": f"inclusion of {wanted}"}))
                    return 1
                found[wanted] = i
                break
        else:
            print(json.dumps({"ok": False, "error": f"not in the log: {wanted}"}))
            return 1
    print(json.dumps({
        "ok": True,
        "origin": cp.origin,
        "size": cp.size,
        "tiles": report.tiles if report else 0,
        "bundles": report.bundles if report else 0,
        "found": found,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
