//! Which CS account an external login is: account policy, not OpenID
//! Connect. (issuer, `sub`) names one account ([`account_name`], Core §2:
//! `sub` is unique only within its issuer); an e-mail is kept only when the
//! provider verified it, and the store refuses one that another account
//! already holds. The `amr` a countersignature carries keeps the values of
//! RFC 8176 only ([`amr_of`]).

use super::{ExternalLogin, LoginError};
use cheq_store::cs::{Account, AccountPutError, Accounts, ExternalId, Identity};
use sha2::{Digest, Sha256};

/// The RFC 8176 authentication method reference values.
pub const RFC8176_AMR: [&str; 21] = [
    "face", "fpt", "geo", "hwk", "iris", "kba", "mca", "mfa", "otp", "pin", "pop", "pwd", "rba",
    "retina", "sc", "sms", "swk", "tel", "user", "vbm", "wia",
];
/// The `amr` of a sign-in whose provider named no RFC 8176 method: "by an
/// external identity provider" (documented in the README).
pub const EXTERNAL_AMR: &str = "ext";

/// The name of the CS account that (issuer, `sub`) stands for: stable,
/// opaque, and a valid user name (`oidc-` and 22 base64url characters).
pub fn account_name(issuer: &str, subject: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"cheq oidc account\0");
    h.update(issuer.as_bytes());
    h.update([0]);
    h.update(subject.as_bytes());
    let digest = cheq_core::sign::b64::encode(h.finalize());
    format!("oidc-{}", &digest[..22])
}

/// The `amr` to countersign with: the provider's values that RFC 8176
/// registers, or [`EXTERNAL_AMR`] when none remains.
pub fn amr_of(provider_amr: &[String]) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for a in provider_amr {
        if RFC8176_AMR.contains(&a.as_str()) && !kept.contains(a) {
            kept.push(a.clone());
        }
    }
    if kept.is_empty() {
        kept.push(EXTERNAL_AMR.to_owned());
    }
    kept
}

/// The CS account of an external login: created at its first sign-in,
/// its e-mail brought up to date at each (only a verified one is kept).
/// Refused when the e-mail belongs to another account (local, or another
/// provider's), so that one CHEQ subject never names two accounts.
pub fn account_for(accounts: &dyn Accounts, login: &ExternalLogin) -> Result<Account, LoginError> {
    let name = account_name(&login.issuer, &login.subject);
    let id = ExternalId {
        issuer: login.issuer.clone(),
        subject: login.subject.clone(),
    };
    let existing = accounts.get(&name)?;
    if let Some(a) = &existing {
        if a.external.as_ref() != Some(&id) {
            return Err(LoginError::AccountClash(name));
        }
        let same = match (&a.email, &login.verified_email) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return Ok(a.clone());
        }
    }
    let account = Account {
        username: name,
        email: login.verified_email.clone(),
        password_hash: String::new(),
        pin_hash: existing.and_then(|a| a.pin_hash),
        external: Some(id),
        user_handle: None,
        passkeys: Vec::new(),
    };
    match accounts.put(&account, true) {
        Ok(()) => Ok(account),
        Err(AccountPutError::Ambiguous(_)) | Err(AccountPutError::Exists(_)) => {
            Err(LoginError::EmailTaken {
                email: login.verified_email.clone().unwrap_or_default(),
            })
        }
        Err(AccountPutError::Store(e)) => Err(e.into()),
    }
}

/// The identity a session holds for an external login.
pub fn identity_of(account: &Account, login: &ExternalLogin) -> Identity {
    Identity {
        sub: account.username.clone(),
        also_known_as: account.email.clone().into_iter().collect(),
        auth_time: login.auth_time,
        amr: login.amr.clone(),
        provider: Some(login.provider.clone()),
        id_token: Some(login.id_token.clone()),
        credential: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names_are_stable_distinct_and_valid() {
        let a = account_name("https://idp.example", "248289761001");
        assert_eq!(a, account_name("https://idp.example", "248289761001"));
        assert_ne!(a, account_name("https://other.example", "248289761001"));
        assert_ne!(a, account_name("https://idp.example", "248289761002"));
        // No confusion by moving the separator.
        assert_ne!(account_name("ab", "c"), account_name("a", "bc"));
        crate::auth::check_username(&a).unwrap();
        assert_eq!(a.len(), 27);
    }

    #[test]
    fn amr_keeps_rfc8176_values_only() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            amr_of(&v(&["pwd", "mfa", "otp"])),
            v(&["pwd", "mfa", "otp"])
        );
        assert_eq!(amr_of(&v(&["pwd", "urn:custom", "pwd"])), v(&["pwd"]));
        assert_eq!(amr_of(&v(&["urn:custom"])), v(&["ext"]));
        assert_eq!(amr_of(&[]), v(&["ext"]));
    }

    fn login(sub: &str, email: Option<&str>) -> ExternalLogin {
        ExternalLogin {
            provider: "example".into(),
            issuer: "http://127.0.0.1:9000".into(),
            subject: sub.into(),
            verified_email: email.map(str::to_owned),
            auth_time: Some(5),
            amr: vec!["pwd".into()],
            id_token: "t".into(),
        }
    }

    #[test]
    fn accounts_follow_the_provider_and_never_share_an_email() {
        let (_dir, store) = cheq_store::sled_cs::temp();
        let accounts = &*store.accounts;
        let a = account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap();
        assert!(a.username.starts_with("oidc-"));
        assert_eq!(a.email.as_deref(), Some("ann@example.com"));
        // Nothing verifies against an external account's empty hash.
        assert!(!crate::auth::verify_secret("", &a.password_hash));
        // The same login again: the same account.
        assert_eq!(
            account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap(),
            a
        );
        // E-mail no longer verified: dropped.
        let b = account_for(accounts, &login("u1", None)).unwrap();
        assert_eq!(b.email, None);
        account_for(accounts, &login("u1", Some("ann@example.com"))).unwrap();
        // Another subject (or provider) cannot take that e-mail.
        assert!(matches!(
            account_for(accounts, &login("u2", Some("ANN@example.com"))),
            Err(LoginError::EmailTaken { .. })
        ));
        // Nor the e-mail of a local account.
        let local =
            crate::auth::new_account("carl", Some("carl@example.com"), "long enough").unwrap();
        accounts.put(&local, false).unwrap();
        assert!(matches!(
            account_for(accounts, &login("u3", Some("carl@example.com"))),
            Err(LoginError::EmailTaken { .. })
        ));
        // A local account that happens to bear the derived name is not taken over.
        let name = account_name("http://127.0.0.1:9000", "u4");
        let squatter = crate::auth::new_account(&name, None, "long enough").unwrap();
        accounts.put(&squatter, false).unwrap();
        assert!(matches!(
            account_for(accounts, &login("u4", None)),
            Err(LoginError::AccountClash(_))
        ));
        let who = identity_of(&a, &login("u1", Some("ann@example.com")));
        assert!(who.is("ann@example.com") && who.is(&a.username));
        assert_eq!(who.provider.as_deref(), Some("example"));
    }
}
