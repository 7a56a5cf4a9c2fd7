//! Byte-level mutations for the stable driver: AFL/libFuzzer-style operators
//! (bit flips, interesting bytes, dictionary tokens, deletions, copies,
//! splices) stacked one to four at a time.

/// xorshift64*: small, fast, reproducible from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Tokens worth inserting: JSON syntax, CHEQ member names, JWS members,
/// dates, URI tricks. Also written to `fuzz/dict/cheq.dict` for libFuzzer.
pub const DICT: &[&str] = &[
    "\"",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1.0",
    "1e999",
    "-1",
    "4096",
    "18446744073709551616",
    "\\u0000",
    "\\ud800",
    "\\ud83d\\ude00",
    "\\\"",
    "\\\\",
    "\\u0061",
    " ",
    "\n",
    "\u{feff}",
    "\u{0}",
    "é",
    "\u{202e}",
    "\"version\"",
    "\"1.0\"",
    "\"operation\"",
    "\"operation name\"",
    "\"inputs\"",
    "\"parameters\"",
    "\"parameter name\"",
    "\"parameter description\"",
    "\"parameter value\"",
    "\"parameter input\"",
    "\"parameter unit\"",
    "\"type\"",
    "\"text\"",
    "\"digits\"",
    "\"amount\"",
    "\"required\"",
    "\"sensitive\"",
    "\"max length\"",
    "\"pattern\"",
    "\"date\"",
    "\"nonce\"",
    "\"resource uri\"",
    "\"confirmation uri\"",
    "\"result uri\"",
    "\"subject\"",
    "\"expires\"",
    "\"language\"",
    "\"en\"",
    "\"pt-BR\"",
    "\"payload\"",
    "\"signatures\"",
    "\"protected\"",
    "\"signature\"",
    "\"header\"",
    "\"alg\"",
    "\"EdDSA\"",
    "\"ES256\"",
    "\"none\"",
    "\"kid\"",
    "\"typ\"",
    "\"cheq+jws\"",
    "\"cheq_role\"",
    "\"crit\"",
    "\"cheq_decision\"",
    "\"b64\"",
    "\"jwk\"",
    "eyJ",
    "==",
    "-",
    "_",
    "+",
    "/",
    "2026-11-22T09:00:00Z",
    "2026-11-23T09:00:00Z",
    "+14:00",
    "-00:00",
    "23:59:60",
    ".999999999",
    "t",
    "z",
    "https://",
    "http://",
    "ftp://",
    "127.0.0.1",
    "[::1]",
    "localhost",
    "0x7f.1",
    "2130706433",
    "api.airline.example",
    "confirm.example",
    ":443",
    ":8081",
    ":0",
    "@",
    "#",
    "?",
    "&",
    ";",
    "%2f",
    "%2F",
    "%2e",
    "%2E",
    "%5c",
    "%00",
    "%25",
    "..",
    "/../",
    "./",
    "//",
    "\\",
    "/cheq/",
    "/cheq/..%2f",
    "xn--",
    "evil.example",
    "/confirmations/",
];

/// Bytes that often sit on a boundary.
const INTERESTING: &[u8] = b"\0\x01\x7f\x80\xff\"\\{}[]:,./%?#@ \t\n-+eE09azAZ";

/// A mutant of `input`; `pool` gives material for splices. At most `max`
/// bytes.
pub fn mutate(rng: &mut Rng, input: &[u8], pool: &[Vec<u8>], max: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    let n = 1 + rng.below(4);
    for _ in 0..n {
        one(rng, &mut out, pool);
    }
    out.truncate(max);
    out
}

fn one(rng: &mut Rng, out: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let len = out.len();
    match rng.below(12) {
        0 if len > 0 => {
            let i = rng.below(len);
            out[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            out[i] = rng.next() as u8;
        }
        2 if len > 0 => {
            let i = rng.below(len);
            out[i] = INTERESTING[rng.below(INTERESTING.len())];
        }
        3 | 4 => {
            let token = DICT[rng.below(DICT.len())].as_bytes();
            let at = rng.below(len + 1);
            out.splice(at..at, token.iter().copied());
        }
        5 if len > 0 => {
            let token = DICT[rng.below(DICT.len())].as_bytes();
            let at = rng.below(len);
            let end = (at + token.len()).min(len);
            out.splice(at..end, token.iter().copied());
        }
        6 if len > 0 => {
            let at = rng.below(len);
            let n = 1 + rng.below((len - at).min(32));
            out.drain(at..at + n);
        }
        7 if len > 0 => {
            let from = rng.below(len);
            let n = 1 + rng.below((len - from).min(64));
            let chunk = out[from..from + n].to_vec();
            let at = rng.below(len + 1);
            out.splice(at..at, chunk);
        }
        8 if !pool.is_empty() => {
            let other = &pool[rng.below(pool.len())];
            let cut = rng.below(len + 1);
            let from = rng.below(other.len() + 1);
            out.truncate(cut);
            out.extend_from_slice(&other[from..]);
        }
        9 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            out.splice(at..at, bytes);
        }
        10 if len > 0 => {
            // Change a digit, so numbers, dates and ports move.
            let start = rng.below(len);
            if let Some(i) = (start..len).find(|&i| out[i].is_ascii_digit()) {
                out[i] = b'0' + rng.below(10) as u8;
            }
        }
        11 if len > 0 => {
            let at = rng.below(len);
            out.truncate(at);
        }
        _ => {
            let at = rng.below(len + 1);
            out.insert(at, INTERESTING[rng.below(INTERESTING.len())]);
        }
    }
}

/// The dictionary in libFuzzer's `-dict=` format.
pub fn libfuzzer_dict() -> String {
    let mut out =
        String::from("# Written by `scripts/fuzz seeds` (examples/fuzz/mutate.rs DICT).\n");
    for token in DICT {
        out.push('"');
        for b in token.bytes() {
            match b {
                b'"' | b'\\' => {
                    out.push('\\');
                    out.push(b as char);
                }
                0x20..=0x7e => out.push(b as char),
                _ => out.push_str(&format!("\\x{b:02X}")),
            }
        }
        out.push_str("\"\n");
    }
    out
}
