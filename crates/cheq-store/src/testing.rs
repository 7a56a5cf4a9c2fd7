//! What parts of the test suite need besides Rust, for the tests of every
//! crate of the workspace: `cargo test` on a machine with only Rust skips
//! them, saying so in one line each ([`can_run`]); `scripts/test` (CI) sets
//! [`REQUIRE_ALL_ENV`], and a missing part fails instead. It lives in the
//! lowest crate whose own tests need one (PostgreSQL).

/// Something a part of the test suite needs besides Rust.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// A PostgreSQL server named by `CHEQ_TEST_DATABASE_URL`.
    Postgres,
    /// Node.js with the packages of `tests/<dir>` installed (`npm ci`).
    Node(&'static str),
    /// Python 3 that can import the module.
    Python(&'static str),
    /// A program on the `PATH` (it answers `--version`).
    Program(&'static str),
}

/// The environment variable naming the PostgreSQL server the tests and
/// benchmarks use (`scripts/pg start` prints it; `scripts/test` sets it).
pub const TEST_DATABASE_ENV: &str = "CHEQ_TEST_DATABASE_URL";

/// The environment variable under which a missing part fails the tests
/// instead of skipping them (`scripts/test`, and so CI, sets it).
pub const REQUIRE_ALL_ENV: &str = "CHEQ_REQUIRE_ALL";

impl Outside {
    /// Why it is missing here, or `None` when it is present.
    fn missing(self) -> Option<String> {
        use std::process::{Command, Stdio};
        let runs = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        match self {
            Outside::Postgres => std::env::var_os(TEST_DATABASE_ENV)
                .is_none()
                .then(|| format!("{TEST_DATABASE_ENV} is not set")),
            Outside::Node(dir) => {
                if !runs("node", &["--version"]) {
                    Some("node is not installed".into())
                } else if !std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
                    .join("tests")
                    .join(dir)
                    .join("node_modules")
                    .is_dir()
                {
                    Some(format!("tests/{dir}/install.sh has not run"))
                } else {
                    None
                }
            }
            Outside::Python(module) => (!runs("python3", &["-c", &format!("import {module}")]))
                .then(|| format!("python3 cannot import {module}")),
            Outside::Program(p) => {
                (!runs(p, &["--version"])).then(|| format!("{p} is not installed"))
            }
        }
    }
}

/// Whether the tests of `what` can run here, needing `parts`. When one is
/// missing: with [`REQUIRE_ALL_ENV`] set this panics naming it; otherwise it
/// says so in one line on standard error, once per test binary and part
/// (written past the test harness's capture, so that `cargo test` shows
/// it), and the caller skips its test.
pub fn can_run(what: &str, parts: &[Outside]) -> bool {
    use std::collections::HashMap;
    use std::io::Write as _;
    use std::sync::{Mutex, OnceLock};
    static SEEN: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
    let seen = SEEN.get_or_init(|| Mutex::new(HashMap::new()));
    for part in parts {
        let key = format!("{part:?}");
        let (missing, first) = {
            let mut seen = match seen.lock() {
                Ok(g) => g,
                Err(e) => e.into_inner(),
            };
            match seen.get(&key) {
                Some(m) => (m.clone(), false),
                None => {
                    let m = part.missing();
                    seen.insert(key.clone(), m.clone());
                    (m, true)
                }
            }
        };
        let Some(why) = missing else { continue };
        if std::env::var_os(REQUIRE_ALL_ENV).is_some() {
            panic!("{what} cannot run: {why} ({REQUIRE_ALL_ENV} is set, so nothing is skipped)");
        }
        if first {
            let _ = writeln!(
                std::io::stderr(),
                "cheq tests: skipped {what}: {why}; scripts/test installs and starts what they need"
            );
        }
        return false;
    }
    true
}
