//! The `cheq` command (see `cheq --help`).
//!
//! The allocator is jemalloc, with two arenas and freed memory returned to
//! the system after a second (`.cargo/config.toml`): over a soak of complete
//! flows it held the demo flat and below the system allocator, which kept
//! growing; mimalloc held about 2.4 times the system allocator's memory
//! (BENCHMARKS.md, issue 13).

fn main() {
    std::process::exit(cheq::cli::main());
}

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
