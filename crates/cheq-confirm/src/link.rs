//! How the flow reaches one resource server (PROTOCOL.md §3, §6, §12): the
//! two things it asks of an RS, fetching the resource-signed CHEQ and
//! delivering the decision. A third-party CS does both over HTTP
//! ([`RsClient`](crate::fetch::RsClient)); a CS inside the resource server
//! (§12) does them in the same process, so no CHEQ travels on the wire. The
//! flow is the same code either way: only the link differs.

use crate::fetch::{FetchError, RsAnswer};
use cheq_core::cheq::Decision;
use std::future::Future;
use std::pin::Pin;

/// A future a link returns.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, FetchError>> + Send + 'a>>;

/// The flow's one way to a resource server.
pub trait RsLink: Send + Sync {
    /// The resource-signed CHEQ at `resource_uri` (§3), its exact bytes.
    fn fetch_cheq<'a>(&'a self, resource_uri: &'a str) -> LinkFuture<'a, Vec<u8>>;

    /// Delivers the two-signature `document` for `resource_uri` (§6).
    fn deliver<'a>(
        &'a self,
        resource_uri: &'a str,
        decision: Decision,
        document: &'a str,
    ) -> LinkFuture<'a, RsAnswer>;
}

impl RsLink for crate::fetch::RsClient {
    fn fetch_cheq<'a>(&'a self, resource_uri: &'a str) -> LinkFuture<'a, Vec<u8>> {
        Box::pin(crate::fetch::RsClient::fetch_cheq(self, resource_uri))
    }

    fn deliver<'a>(
        &'a self,
        resource_uri: &'a str,
        decision: Decision,
        document: &'a str,
    ) -> LinkFuture<'a, RsAnswer> {
        Box::pin(crate::fetch::RsClient::deliver(
            self,
            resource_uri,
            decision,
            document,
        ))
    }
}
