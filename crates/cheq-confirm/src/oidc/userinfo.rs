//! The UserInfo request (OpenID Connect Core 1.0 §5.3): many providers put
//! the e-mail there only (§5.4). Asked with the sign-in's access token, for
//! the ID token's `sub` (§5.3.2: the crate checks the answer is for it), and
//! read through the capped exchange like every answer of a provider.

use super::discovery::{capped, Discovered, Endpoint};
use super::{misconfigured, unreachable, LoginError, Provider, ProviderHttpError, Providers};
use openidconnect::core::CoreTokenResponse;

impl Providers {
    /// The verified e-mail of the UserInfo answer, if the provider has the
    /// endpoint and says it verified the address.
    pub(super) async fn userinfo_email(
        &self,
        p: &Provider,
        d: &Discovered,
        response: &CoreTokenResponse,
        subject: openidconnect::SubjectIdentifier,
    ) -> Result<Option<String>, LoginError> {
        use openidconnect::OAuth2TokenResponse;
        if d.metadata.userinfo_endpoint().is_none() {
            return Ok(None);
        }
        let client = self.client(p, d);
        let http = |request| capped(self.http.clone(), Endpoint::UserInfo, request);
        let info: openidconnect::core::CoreUserInfoClaims = client
            .user_info(response.access_token().clone(), Some(subject))
            .map_err(|e| misconfigured(&p.name, e.to_string()))?
            .request_async(&http)
            .await
            .map_err(|e| match e {
                openidconnect::UserInfoError::Request(cause) => unreachable(&p.name, cause),
                openidconnect::UserInfoError::Response(status, _, _) => unreachable(
                    &p.name,
                    ProviderHttpError::Status {
                        what: Endpoint::UserInfo,
                        status: status.as_u16(),
                    },
                ),
                e => LoginError::TokenRequest {
                    provider: p.name.clone(),
                    detail: cheq_support::text::one_line(&format!("userinfo: {e}")),
                },
            })?;
        Ok(match (info.email(), info.email_verified()) {
            (Some(e), Some(true)) => Some(e.as_str().to_owned()),
            _ => None,
        })
    }
}
