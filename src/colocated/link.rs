//! The CS flow's link to the resource server in its own process (§12): the
//! fetch of the CHEQ and the delivery of the decision are calls into the RS
//! domain ([`CheqRs`]), not HTTP requests. Their errors go through the RS's
//! one mapping of its errors ([`ApiError`]) and come out as the answers the
//! flow reads from an RS over HTTP, so the flow cannot tell the two apart.

use crate::cheq::Decision;
use crate::confirm::fetch::{FetchError, RsAnswer};
use crate::confirm::link::{LinkFuture, RsLink};
use crate::metrics::RsMetrics;
use crate::resource::cheq_rs::{CheqRs, CheqRsError};
use crate::resource::ApiError;
use std::sync::Arc;

/// The RS of this process, as the CS flow reaches it.
pub struct InProcess {
    cheq: Arc<CheqRs>,
    metrics: RsMetrics,
}

impl InProcess {
    pub fn new(cheq: Arc<CheqRs>, metrics: RsMetrics) -> Self {
        InProcess { cheq, metrics }
    }

    /// The confirmation id of a resource URI of this RS.
    fn id_of(&self, resource_uri: &str) -> Result<String, FetchError> {
        let prefix = self.cheq.resource_uri("");
        match resource_uri.strip_prefix(&prefix) {
            Some(id) if !id.is_empty() && !id.contains(['/', '?', '#']) => Ok(id.to_owned()),
            _ => Err(FetchError::NotFound),
        }
    }
}

/// What an RS error would have been over HTTP, as the flow reads it.
fn fetch_error(e: CheqRsError) -> FetchError {
    let e = ApiError::from(e);
    match e.status.as_u16() {
        404 => FetchError::NotFound,
        410 => FetchError::Gone,
        status => FetchError::Status {
            status,
            body: e.code.to_owned(),
        },
    }
}

impl RsLink for InProcess {
    fn fetch_cheq<'a>(&'a self, resource_uri: &'a str) -> LinkFuture<'a, Vec<u8>> {
        Box::pin(async move {
            let id = self.id_of(resource_uri)?;
            let cheq = self.cheq.clone();
            // The hosted confirmation is the RS's default CS: the CHEQs of
            // users who chose another are not its own (§17).
            let own = cheq.confirmation_server().origin();
            match tokio::task::spawn_blocking(move || cheq.fetch_for(&id, Some(&own))).await {
                Ok(Ok(document)) => Ok(document.into_bytes()),
                Ok(Err(e)) => Err(fetch_error(e)),
                Err(_) => Err(FetchError::Status {
                    status: 500,
                    body: "the worker failed".into(),
                }),
            }
        })
    }

    fn deliver<'a>(
        &'a self,
        resource_uri: &'a str,
        decision: Decision,
        document: &'a str,
    ) -> LinkFuture<'a, RsAnswer> {
        Box::pin(async move {
            // A resource URI that is not this RS's is a refusal, as a 404
            // over HTTP is: never retried.
            let Ok(id) = self.id_of(resource_uri) else {
                return Ok(RsAnswer::Refused {
                    status: 404,
                    error: "not_found".into(),
                    description: "no such confirmation".into(),
                });
            };
            let id = Arc::new(id);
            let body: Arc<[u8]> = Arc::from(document.as_bytes());
            let own: Arc<str> = Arc::from(self.cheq.confirmation_server().origin());
            let answer = self
                .cheq
                .decide_async_by(id, decision, body, Some(own))
                .await;
            match answer {
                Ok(answer) => {
                    self.metrics
                        .decisions
                        .with_label_values(&[decision.as_str()])
                        .inc();
                    Ok(RsAnswer::Recorded(answer))
                }
                Err(e) => {
                    let e = ApiError::from(e);
                    self.metrics.refusals.with_label_values(&[e.code]).inc();
                    match e.status.as_u16() {
                        410 => Ok(RsAnswer::Expired),
                        status if status >= 500 || status == 429 => Err(FetchError::Status {
                            status,
                            body: e.code.to_owned(),
                        }),
                        status => Ok(RsAnswer::Refused {
                            status,
                            error: e.code.to_owned(),
                            description: crate::text::snippet(
                                e.description.as_bytes(),
                                crate::confirm::fetch::MAX_RS_WORDS,
                            ),
                        }),
                    }
                }
            }
        })
    }
}
