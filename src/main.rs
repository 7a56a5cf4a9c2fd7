//! The `cheq` command (see `cheq --help`).
//!
//! The allocator is jemalloc, with two arenas and freed memory returned to
//! the system after a second (`.cargo/config.toml`): over a soak of complete
//! flows it held the demo flat and below the system allocator, which kept
//! growing; mimalloc held far more memory than the system allocator
//! (BENCHMARKS.md).
//!
//! tokio's blocking pool is asked for its sharded queue (`TOKIO_UNSTABLE_
//! SHARDED_BLOCKING_QUEUE`, read when each runtime is built) unless the
//! variable is set already (`0` turns it off): store calls and signatures
//! run on that pool, and its one mutex was the most contended lock of a
//! server under load (BENCHMARKS.md).

/// tokio's switch for its sharded blocking queue.
const SHARDED_BLOCKING_QUEUE: &str = "TOKIO_UNSTABLE_SHARDED_BLOCKING_QUEUE";

fn main() {
    // Before any thread or runtime exists.
    if std::env::var_os(SHARDED_BLOCKING_QUEUE).is_none() {
        std::env::set_var(SHARDED_BLOCKING_QUEUE, "1");
    }
    std::process::exit(cheq::cli::main());
}

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
