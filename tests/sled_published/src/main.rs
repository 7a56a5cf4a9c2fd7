//! Opens a sled database with sled 0.34.7 as published on crates.io and
//! prints, for every tree, its name, its number of items and a digest of
//! its keys and values (FNV-1a over each key's and value's length and
//! bytes, in order): `tests/sled_format.rs` compares these with what cheq's
//! own sled reads, to show that a cheq data directory needs no patched
//! sled. Usage: `cheq-sled-published DIR`. Exit code 1 (and the reason on
//! stderr) when the database cannot be opened or read.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: cheq-sled-published DIR");
        return ExitCode::FAILURE;
    };
    match run(std::path::Path::new(&dir)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("published sled: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the database was created compressed (its `conf` says; sled
/// refuses to open it with the other setting).
fn compressed(dir: &std::path::Path) -> bool {
    std::fs::read(dir.join("conf"))
        .map(|conf| {
            String::from_utf8_lossy(&conf)
                .lines()
                .any(|l| l.trim() == "use_compression: true")
        })
        .unwrap_or(false)
}

fn run(dir: &std::path::Path) -> Result<(), sled::Error> {
    let db = sled::Config::new()
        .path(dir)
        .use_compression(compressed(dir))
        .open()?;
    let mut names = db.tree_names();
    names.sort();
    for name in names {
        let tree = db.open_tree(&name)?;
        let mut count = 0u64;
        let mut digest = Fnv::new();
        for item in tree.iter() {
            let (k, v) = item?;
            count += 1;
            digest.add(&k);
            digest.add(&v);
        }
        println!(
            "{}\t{count}\t{:016x}",
            String::from_utf8_lossy(&name),
            digest.0
        );
    }
    Ok(())
}

/// FNV-1a, 64 bits, over a length (8 bytes, little-endian) and the bytes.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn add(&mut self, bytes: &[u8]) {
        let len = (bytes.len() as u64).to_le_bytes();
        for b in len.iter().chain(bytes) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}
