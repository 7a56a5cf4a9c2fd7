//! For the store tests that write rows as earlier versions did: a fresh
//! database of the throwaway PostgreSQL (`scripts/test` starts it), its
//! store pool, and a plain client on a runtime of its own.

use cheq::store::pg::Pg;

/// A fresh database named after `prefix`: its pool, a runtime, and a plain
/// client driven on that runtime; `None` when there is no test server (the
/// test is skipped, saying so).
pub fn fresh(prefix: &str) -> Option<(Pg, tokio::runtime::Runtime, tokio_postgres::Client)> {
    let url = cheq::store::pg::test_database_or_skip(prefix)?;
    let pg = Pg::new(&url, 2).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (client, conn) = rt
        .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
        .unwrap();
    rt.spawn(conn);
    Some((pg, rt, client))
}
