//! The RS's discovery document (PROTOCOL.md §16.2), as the reference RS
//! publishes it at `/.well-known/cheq-resource`.

use super::cheq_rs::CONFIRMATIONS_PATH;
use super::config::{ClientRole, RsConfig};
use super::server::TOKEN_PATH;
use cheq_core::discovery::{ResourceDocument, CLIENT_SECRET_BASIC, PRIVATE_KEY_JWT};

/// This RS's discovery document (§16.2): its origin and name, where its
/// resource URIs, keys and token endpoint are, and how a CS authenticates
/// there: with a `cs` client's secret when it has one, and with its own
/// key (a CS named by issuer, or one a user chose, §17).
pub fn resource_document(config: &RsConfig) -> ResourceDocument {
    let base = config.base_url();
    let mut methods = Vec::new();
    if config.clients.iter().any(|c| c.role == ClientRole::Cs) {
        methods.push(CLIENT_SECRET_BASIC.to_owned());
    }
    methods.push(PRIVATE_KEY_JWT.to_owned());
    ResourceDocument {
        resource: base.clone(),
        name: config.display_name(),
        resource_prefix: format!("{base}{CONFIRMATIONS_PATH}"),
        jwks_uri: format!("{base}/.well-known/jwks.json"),
        token_endpoint: format!("{base}{TOKEN_PATH}"),
        token_endpoint_auth_methods_supported: methods,
    }
}
