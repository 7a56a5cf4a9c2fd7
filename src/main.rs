//! The `cheq` command (see `cheq --help`).
//!
//! The system allocator stays: mimalloc cut a verification by about 45,000
//! instructions, but held about 2.4 times the resident memory under load
//! (BENCHMARKS.md, issue 13).

fn main() {
    std::process::exit(cheq::cli::main());
}
