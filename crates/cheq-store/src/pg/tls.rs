//! TLS to PostgreSQL, with libpq's meaning of `sslmode` and `sslrootcert`
//! in the database URL, so that a URL an operator already uses with `psql`
//! means the same here (before, the connections were plain
//! whatever the URL said).
//!
//! | `sslmode` | encrypted | server's certificate checked |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default, as in libpq) | when the server offers it | no |
//! | `require` | always | no; with `sslrootcert`, its chain, as `verify-ca` |
//! | `verify-ca` | always | its chain, against `sslrootcert` (which it needs) |
//! | `verify-full` | always | its chain, against `sslrootcert` or else the system's roots (`sslrootcert=system` says so), and that it names the URL's host |
//!
//! Over a Unix socket `sslmode` does not apply, as in libpq (`Pg::new`): the
//! socket never leaves the machine, and PostgreSQL offers no TLS there.
//!
//! As in libpq, the environment's `PGSSLMODE` and `PGSSLROOTCERT` stand for
//! a parameter the URL leaves out (the URL wins when it names one).
//!
//! As in libpq since PostgreSQL 16, the system's roots are trusted with
//! `verify-full` only: any public CA signs certificates for some name, so
//! without the host check they would let anyone holding one through.
//! tokio-postgres reads `sslmode` as `disable`, `prefer` or `require` only and
//! refuses `sslrootcert`: both are taken out of the URL here, and the URL
//! handed on says `require` for the three modes that always encrypt. The
//! certificate checks are the connector's ([`native_tls`], OpenSSL on Linux,
//! the same library reqwest already uses), built once per pool.

use super::{backend, StoreError};
use std::path::{Path, PathBuf};

/// libpq's `sslmode`, the modes that tokio-postgres supports and the three
/// that always encrypt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// `value` as `name` (`sslmode`, or `PGSSLMODE`) gives it.
    fn parse(name: &str, value: &str) -> Result<SslMode, StoreError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(backend(
                    "database_url",
                    format!(
                        "{name}={other:?} is not one of disable, prefer, require, verify-ca, \
                         verify-full"
                    ),
                ))
            }
        })
    }

    /// What tokio-postgres is told.
    fn driver_value(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => "require",
        }
    }

    /// The name in the URL.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// What a database URL says about TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    /// The PEM file of the certificates that may sign the server's chain:
    /// the only roots then, as in libpq. `None`: the system's roots, for
    /// `verify-full` only.
    pub root_cert: Option<PathBuf>,
}

/// `sslrootcert`'s value that names the system's roots (libpq 16).
const SYSTEM_ROOTS: &str = "system";

/// Splits `url` into the URL tokio-postgres reads and its TLS settings,
/// with `PGSSLMODE` and `PGSSLROOTCERT` from the environment for what the
/// URL leaves out. A connection string that is not a URL (`host=…
/// dbname=…`) is handed on whole, with tokio-postgres's own `sslmode`
/// (libpq's extra modes, `sslrootcert` and the environment's defaults need
/// the URL form: with either variable set, such a string is refused rather
/// than connected with less than they ask for).
pub fn split(url: &str) -> Result<(String, TlsSettings), StoreError> {
    let read = |name: &str| match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(backend(
            "database_url",
            format!("the environment's {name} is not UTF-8"),
        )),
    };
    let (mode, root) = (read("PGSSLMODE")?, read("PGSSLROOTCERT")?);
    split_with(url, |name| match name {
        "PGSSLMODE" => mode.clone(),
        "PGSSLROOTCERT" => root.clone(),
        _ => None,
    })
}

/// [`split`], with the environment's variables read through `env`.
pub fn split_with(
    url: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(String, TlsSettings), StoreError> {
    // libpq's defaults from the environment; an empty value is no value.
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    let is_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let parsed = if is_url {
        url::Url::parse(url).ok()
    } else {
        None
    };
    let Some(mut parsed) = parsed else {
        if let Some(name) = ["PGSSLMODE", "PGSSLROOTCERT"]
            .into_iter()
            .find(|name| env(name).is_some())
        {
            return Err(backend(
                "database_url",
                format!(
                    "{name} is set, and applies to a database URL of the form \
                     postgres://user@host:port/db only: write database_url so, with sslmode \
                     and sslrootcert in it if you like, or unset {name}"
                ),
            ));
        }
        // tokio-postgres reads it (and says what is wrong, if anything).
        let mode = match url
            .parse::<tokio_postgres::Config>()
            .map(|c| c.get_ssl_mode())
        {
            Ok(tokio_postgres::config::SslMode::Disable) => SslMode::Disable,
            Ok(tokio_postgres::config::SslMode::Require) => SslMode::Require,
            _ => SslMode::Prefer,
        };
        return Ok((
            url.to_owned(),
            TlsSettings {
                mode,
                root_cert: None,
            },
        ));
    };
    // The other parameters are kept byte for byte: tokio-postgres decodes
    // them with percent-decoding alone (a `+` stays a `+`), which a form
    // encoder's round trip would not respect.
    let mut mode: Option<SslMode> = None;
    let mut root_cert: Option<String> = None;
    let mut kept: Vec<&str> = Vec::new();
    let query = parsed.query().unwrap_or_default().to_owned();
    for segment in query.split('&').filter(|s| !s.is_empty()) {
        let (key, value) = segment.split_once('=').unwrap_or((segment, ""));
        let decoded = |text: &str| {
            percent_encoding::percent_decode_str(text)
                .decode_utf8()
                .map(|v| v.into_owned())
                .map_err(|_| backend("database_url", "a TLS parameter is not UTF-8"))
        };
        match decoded(key)?.as_str() {
            "sslmode" => mode = Some(SslMode::parse("sslmode", &decoded(value)?)?),
            "sslrootcert" => root_cert = Some(decoded(value)?),
            _ => kept.push(segment),
        }
    }
    let root_cert = root_cert.or_else(|| env("PGSSLROOTCERT"));
    let mode = match (mode, env("PGSSLMODE")) {
        (Some(mode), _) => mode,
        (None, Some(value)) => SslMode::parse("PGSSLMODE", &value)?,
        // As in libpq 16: the system's roots make verify-full the default.
        (None, None) if root_cert.as_deref() == Some(SYSTEM_ROOTS) => SslMode::VerifyFull,
        (None, None) => SslMode::Prefer,
    };
    let root_cert =
        match root_cert.as_deref() {
            None | Some(SYSTEM_ROOTS) if mode == SslMode::VerifyCa => {
                return Err(backend(
                    "database_url",
                    "sslmode=verify-ca needs sslrootcert=FILE (or PGSSLROOTCERT), the CA that signs \
                 the database's certificate (the system's roots are trusted with verify-full only, which also \
                 checks the host name)",
                ))
            }
            Some(SYSTEM_ROOTS) if mode != SslMode::VerifyFull => return Err(backend(
                "database_url",
                "sslrootcert=system needs sslmode=verify-full (without the host name check, any \
                 certificate a public CA issued would pass)",
            )),
            None | Some(SYSTEM_ROOTS) => None,
            Some(file) => Some(PathBuf::from(file)),
        };
    let sslmode = format!("sslmode={}", mode.driver_value());
    kept.push(&sslmode);
    parsed.set_query(Some(&kept.join("&")));
    Ok((parsed.to_string(), TlsSettings { mode, root_cert }))
}

/// Logs the TLS mode, or [`unchecked_warning`]'s warning.
pub fn warn_if_unchecked(settings: &TlsSettings, config: &tokio_postgres::Config) {
    match unchecked_warning(settings, config.get_hosts(), config.get_hostaddrs()) {
        Some(warning) => log::warn!("{warning}"),
        None => log::info!("PostgreSQL connections: sslmode={}", settings.mode.as_str()),
    }
}

/// A warning when a database reached over the network (not loopback, not a
/// Unix socket; by host name or by `hostaddr`) is trusted without a
/// certificate check.
pub fn unchecked_warning(
    settings: &TlsSettings,
    hosts: &[tokio_postgres::config::Host],
    hostaddrs: &[std::net::IpAddr],
) -> Option<String> {
    let checked = match settings.mode {
        SslMode::VerifyFull | SslMode::VerifyCa => true,
        SslMode::Require => settings.root_cert.is_some(),
        SslMode::Prefer | SslMode::Disable => false,
    };
    let remote = hostaddrs.iter().any(|ip| !ip.to_canonical().is_loopback())
        || hosts.iter().any(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => {
                name != "localhost"
                    && !name
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.to_canonical().is_loopback())
            }
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(_) => false,
        });
    (remote && !checked).then(|| {
        format!(
            "PostgreSQL is reached over the network with sslmode={} and no checked certificate: \
             anyone on the path can read or change what is stored; use sslmode=verify-full \
             with sslrootcert",
            settings.mode.as_str()
        )
    })
}

/// The connector for `settings` (`None`: plain connections).
pub fn connector(
    settings: &TlsSettings,
) -> Result<Option<postgres_native_tls::MakeTlsConnector>, StoreError> {
    if settings.mode == SslMode::Disable {
        return Ok(None);
    }
    let mut builder = native_tls::TlsConnector::builder();
    builder.min_protocol_version(Some(native_tls::Protocol::Tlsv12));
    // verify-ca always has a root file (`split` refuses it without one).
    let checks_chain = match settings.mode {
        SslMode::VerifyCa | SslMode::VerifyFull => true,
        SslMode::Require => settings.root_cert.is_some(),
        SslMode::Prefer | SslMode::Disable => false,
    };
    if let Some(path) = &settings.root_cert {
        builder.disable_built_in_roots(true);
        for cert in root_certificates(path)? {
            builder.add_root_certificate(cert);
        }
    }
    builder.danger_accept_invalid_certs(!checks_chain);
    builder.danger_accept_invalid_hostnames(settings.mode != SslMode::VerifyFull);
    let connector = builder
        .build()
        .map_err(|e| backend("database TLS", e.to_string()))?;
    Ok(Some(postgres_native_tls::MakeTlsConnector::new(connector)))
}

/// Every certificate of the PEM file at `path` (a bundle may hold several).
fn root_certificates(path: &Path) -> Result<Vec<native_tls::Certificate>, StoreError> {
    let err = |reason: String| {
        backend(
            "database_url",
            format!("sslrootcert {}: {reason}", path.display()),
        )
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    const END: &str = "-----END CERTIFICATE-----";
    let mut certs = Vec::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let block = &rest[start..];
        let end = block
            .find(END)
            .ok_or_else(|| err("a certificate has no END line".into()))?
            + END.len();
        let cert = native_tls::Certificate::from_pem(&block.as_bytes()[..end])
            .map_err(|e| err(e.to_string()))?;
        certs.push(cert);
        rest = &block[end..];
    }
    if certs.is_empty() {
        return Err(err("holds no PEM certificate".into()));
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`super::split`] without the environment of whoever runs the tests.
    fn split(url: &str) -> Result<(String, TlsSettings), StoreError> {
        split_with(url, |_| None)
    }

    #[test]
    fn libpq_parameters_are_taken_out_of_the_url() {
        let (url, tls) = split(
            "postgres://cheq:pw@db.example:5432/cheq?sslmode=verify-full&sslrootcert=/etc/ca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(
            url,
            "postgres://cheq:pw@db.example:5432/cheq?application_name=x&sslmode=require"
        );
        let config: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn other_parameters_are_kept_byte_for_byte() {
        let (url, tls) = split(
            "postgres://u:p%20w@h/db?options=-c%20statement_timeout%3D5000&password=a+b%20c&sslrootcert=%2Fetc%2Fca%20x.pem&sslmode=verify-full",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u:p%20w@h/db?options=-c%20statement_timeout%3D5000&password=a+b%20c&sslmode=require"
        );
        assert_eq!(tls.root_cert.as_deref(), Some(Path::new("/etc/ca x.pem")));
        let config: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(config.get_options(), Some("-c statement_timeout=5000"));
        assert_eq!(config.get_password(), Some(&b"a+b c"[..]));
    }

    #[test]
    fn the_systems_roots_only_with_the_host_checked() {
        for url in [
            "postgres://h/db?sslmode=verify-ca",
            "postgres://h/db?sslmode=verify-ca&sslrootcert=system",
        ] {
            let e = split(url).unwrap_err();
            assert!(e.to_string().contains("verify-ca needs sslrootcert"), "{e}");
        }
        for mode in ["require", "prefer"] {
            let e = split(&format!(
                "postgres://h/db?sslmode={mode}&sslrootcert=system"
            ))
            .unwrap_err();
            assert!(e.to_string().contains("needs sslmode=verify-full"), "{e}");
        }
        for url in [
            "postgres://h/db?sslmode=verify-full",
            "postgres://h/db?sslmode=verify-full&sslrootcert=system",
        ] {
            let (_, tls) = split(url).unwrap();
            assert_eq!(tls.root_cert, None, "{url}");
            assert!(connector(&tls).unwrap().is_some());
        }
    }

    #[test]
    fn the_default_is_prefer_as_in_libpq() {
        let (url, tls) = split("postgres://cheq@127.0.0.1:5432/cheq").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
        assert_eq!(tls.root_cert, None);
        assert!(url.ends_with("?sslmode=prefer"), "{url}");
        for (value, mode, driver) in [
            ("disable", SslMode::Disable, "disable"),
            ("require", SslMode::Require, "require"),
            ("verify-ca&sslrootcert=ca.pem", SslMode::VerifyCa, "require"),
        ] {
            let (url, tls) = split(&format!("postgresql://h/db?sslmode={value}")).unwrap();
            assert_eq!(tls.mode, mode);
            assert!(url.ends_with(&format!("sslmode={driver}")), "{url}");
        }
    }

    #[test]
    fn an_unknown_mode_or_an_unreadable_root_file_is_refused_by_name() {
        let e = split("postgres://h/db?sslmode=verify_full").unwrap_err();
        assert!(e.to_string().contains("verify_full"), "{e}");
        let settings = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(PathBuf::from("/nonexistent/ca.pem")),
        };
        let e = connector(&settings).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let settings = TlsSettings {
            mode: SslMode::VerifyCa,
            root_cert: Some(empty),
        };
        let e = connector(&settings).err().unwrap();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
    }

    #[test]
    fn every_certificate_of_a_bundle_is_a_root() {
        let one = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/unrelated-ca.pem"
        ))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("bundle.pem");
        std::fs::write(&bundle, format!("# two roots\n{one}\n{one}")).unwrap();
        assert_eq!(root_certificates(&bundle).unwrap().len(), 2);
        // A bundle cut short is refused, not read in part.
        std::fs::write(&bundle, format!("{one}{}", &one[..one.len() / 2])).unwrap();
        let e = root_certificates(&bundle).err().unwrap();
        assert!(e.to_string().contains("END"), "{e}");
    }

    #[test]
    fn the_environment_stands_for_what_the_url_leaves_out() {
        let env = |mode: &'static str, root: &'static str| {
            move |name: &str| match name {
                "PGSSLMODE" => Some(mode.to_owned()),
                "PGSSLROOTCERT" => Some(root.to_owned()),
                _ => None,
            }
        };
        // Both from the environment.
        let (url, tls) = split_with("postgres://h/db", env("verify-ca", "/etc/ca.pem")).unwrap();
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert.as_deref(), Some(Path::new("/etc/ca.pem")));
        assert!(url.ends_with("?sslmode=require"), "{url}");
        // The URL wins for what it names.
        let (_, tls) = split_with(
            "postgres://h/db?sslmode=disable&sslrootcert=/own.pem",
            env("verify-full", "/etc/ca.pem"),
        )
        .unwrap();
        assert_eq!(tls.mode, SslMode::Disable);
        assert_eq!(tls.root_cert.as_deref(), Some(Path::new("/own.pem")));
        // Empty values are no values: libpq's default.
        let (_, tls) = split_with("postgres://h/db", env("", "")).unwrap();
        assert_eq!(
            tls,
            TlsSettings {
                mode: SslMode::Prefer,
                root_cert: None
            }
        );
        // Refused as the URL's own values would be, naming the variable.
        let e = split_with("postgres://h/db", env("verify_full", "")).unwrap_err();
        assert!(e.to_string().contains("PGSSLMODE=\"verify_full\""), "{e}");
        let e = split_with("postgres://h/db", env("verify-ca", "")).unwrap_err();
        assert!(e.to_string().contains("PGSSLROOTCERT"), "{e}");
        let e = split_with("postgres://h/db?sslmode=require", env("", "system")).unwrap_err();
        assert!(e.to_string().contains("needs sslmode=verify-full"), "{e}");
        // As in libpq 16, the system's roots alone make verify-full the mode.
        for (url, root) in [
            ("postgres://h/db?sslrootcert=system", ""),
            ("postgres://h/db", "system"),
        ] {
            let (_, tls) = split_with(url, env("", root)).unwrap();
            assert_eq!(tls.mode, SslMode::VerifyFull, "{url} {root}");
            assert_eq!(tls.root_cert, None);
        }
        // A connection string of keys and values cannot say libpq's modes:
        // with either variable set it is refused, not connected with less.
        for (mode, root, name) in [
            ("verify-full", "", "PGSSLMODE"),
            ("", "/ca.pem", "PGSSLROOTCERT"),
        ] {
            let e = split_with("host=h dbname=db", env(mode, root)).unwrap_err();
            assert!(e.to_string().contains(&format!("{name} is set")), "{e}");
        }
        assert!(split_with("host=h dbname=db", env("", "")).is_ok());
    }

    #[test]
    fn an_unchecked_database_beyond_loopback_is_warned_of() {
        use tokio_postgres::config::Host;
        let tcp = |name: &str| vec![Host::Tcp(name.to_owned())];
        let settings = |mode, root: Option<&str>| TlsSettings {
            mode,
            root_cert: root.map(PathBuf::from),
        };
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            let warning =
                unchecked_warning(&settings(mode, None), &tcp("db.example"), &[]).unwrap();
            assert!(
                warning.contains(&format!("sslmode={}", mode.as_str())),
                "{warning}"
            );
            assert!(unchecked_warning(&settings(mode, None), &tcp("10.0.0.5"), &[]).is_some());
            // Loopback, in every spelling, is not the network.
            for name in [
                "localhost",
                "127.0.0.1",
                "127.8.9.1",
                "::1",
                "[::1]",
                "::ffff:127.0.0.1",
            ] {
                assert_eq!(
                    unchecked_warning(&settings(mode, None), &tcp(name), &[]),
                    None,
                    "{name}"
                );
            }
            #[cfg(unix)]
            assert_eq!(
                unchecked_warning(&settings(mode, None), &[Host::Unix("/run/pg".into())], &[]),
                None
            );
        }
        // One remote host among others is enough.
        let mixed = vec![
            Host::Tcp("localhost".into()),
            Host::Tcp("db.example".into()),
        ];
        assert!(unchecked_warning(&settings(SslMode::Prefer, None), &mixed, &[]).is_some());
        // A name of loopback with a remote `hostaddr` is the network.
        let remote_addr = ["10.0.0.5".parse().unwrap()];
        let local_addr = ["127.0.0.1".parse().unwrap()];
        let prefer = settings(SslMode::Prefer, None);
        assert!(unchecked_warning(&prefer, &tcp("localhost"), &remote_addr).is_some());
        assert_eq!(
            unchecked_warning(&prefer, &tcp("localhost"), &local_addr),
            None
        );
        // A checked certificate: no warning.
        for (mode, root) in [
            (SslMode::Require, Some("/etc/ca.pem")),
            (SslMode::VerifyCa, Some("/etc/ca.pem")),
            (SslMode::VerifyFull, None),
        ] {
            assert_eq!(
                unchecked_warning(&settings(mode, root), &tcp("db.example"), &[]),
                None
            );
        }
    }

    #[test]
    fn a_connection_string_keeps_the_drivers_own_modes() {
        let (url, tls) = split("host=127.0.0.1 dbname=cheq sslmode=disable").unwrap();
        assert_eq!(url, "host=127.0.0.1 dbname=cheq sslmode=disable");
        assert_eq!(tls.mode, SslMode::Disable);
        assert!(connector(&tls).unwrap().is_none());
    }
}
