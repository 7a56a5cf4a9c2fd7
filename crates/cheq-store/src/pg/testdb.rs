//! Fresh databases for tests and benchmarks on the server that
//! [`TEST_DATABASE_ENV`] names.

use super::{backend, client, db_error, Pg, UrlError};
use crate::StoreError;

/// Creates a new, empty database named `prefix` and 64 random bits on the
/// server of `base_url` (whose user may create databases), and returns its
/// URL: one database per test or benchmark run.
pub fn fresh_database(base_url: &str, prefix: &str) -> Result<String, StoreError> {
    let mut url = url::Url::parse(base_url)
        .map_err(|e| backend("database_url", UrlError(e.to_string()).to_string()))?;
    let name = format!(
        "{}_{:016x}",
        prefix
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<String>()
            .to_ascii_lowercase(),
        rand::random::<u64>()
    );
    let pg = Pg::new(base_url, 1)?;
    let sql = format!("CREATE DATABASE \"{name}\"");
    pg.call("create database", move |pool| async move {
        let c = client(&pool, "create database").await?;
        c.batch_execute(&sql)
            .await
            .map_err(db_error("create database"))
    })?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

pub use crate::testing::TEST_DATABASE_ENV;

/// A fresh database on the test server of [`TEST_DATABASE_ENV`], or `None`
/// when there is none and the tests of `prefix` are skipped (see
/// [`crate::testing::can_run`]).
pub fn test_database_or_skip(prefix: &str) -> Option<String> {
    use crate::testing::{can_run, Outside};
    if !can_run("the PostgreSQL tests", &[Outside::Postgres]) {
        return None;
    }
    match test_database(prefix) {
        Ok(url) => Some(url),
        Err(e) => panic!("a test database for {prefix}: {e}"),
    }
}

/// A fresh database on the test server of [`TEST_DATABASE_ENV`].
pub fn test_database(prefix: &str) -> Result<String, String> {
    let base = std::env::var(TEST_DATABASE_ENV).map_err(|_| {
        format!(
            "{TEST_DATABASE_ENV} is not set: run the tests with scripts/test, or start a \
             throwaway PostgreSQL with `eval \"$(scripts/pg start /tmp/cheq-pg)\"`"
        )
    })?;
    fresh_database(&base, prefix).map_err(|e| e.to_string())
}
