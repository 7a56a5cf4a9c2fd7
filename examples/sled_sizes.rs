//! What a sled database holds, tree by tree: entries, the bytes of keys and
//! values, and the leaves that hold them with their mean entries
//! (`cargo run --release --example sled_sizes -- DIR...`), beside what its
//! files take on disk. Used to find where the disk and the memory per
//! decided confirmation go (BENCHMARKS.md).
//!
//! Build it from the same sources as the server that wrote the database:
//! sled splits a node it walks through when the node is past its split
//! rule, so a build with other rules writes to the database it reads (and a
//! build that knows fewer kinds of log entry cannot read it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::os::unix::fs::MetadataExt;

fn disk(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for dir in std::env::args().skip(1) {
        let dir = std::path::Path::new(&dir);
        let db = cheq::store::sled_config(dir).open()?;
        println!("{}: {} bytes on disk", dir.display(), disk(dir));
        let mut total = 0;
        for name in db.tree_names() {
            let tree = db.open_tree(&name)?;
            let (mut n, mut k, mut v) = (0u64, 0u64, 0u64);
            for item in tree.iter() {
                let (key, value) = item?;
                n += 1;
                k += key.len() as u64;
                v += value.len() as u64;
            }
            total += k + v;
            let leaves = tree.leaf_sizes()?.len();
            println!(
                "  {:<24} {:>8} entries {:>10} key bytes {:>12} value bytes {:>7} leaves ({:.1} entries each)",
                String::from_utf8_lossy(&name),
                n,
                k,
                v,
                leaves,
                n as f64 / leaves.max(1) as f64
            );
        }
        println!("  total live bytes {total}");
    }
    Ok(())
}
