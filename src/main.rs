//! The `cheq` command (see `cheq --help`).

/// mimalloc instead of glibc's allocator: fewer instructions per allocation
/// on the signing and verification paths, and memory given back to the
/// system instead of held per thread (BENCHMARKS.md, issue 13).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cheq::cli::main());
}
