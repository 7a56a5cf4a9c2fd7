//! Exchanges whose answers are read up to a cap (PROTOCOL.md §3): the
//! token requests of the `oauth2` and `openidconnect` crates, made through
//! the CS's bounded client, and any body read from a peer.

/// Why a capped exchange failed, before the caller names whose answer it
/// was.
#[derive(Debug)]
pub(crate) enum Capped {
    /// The body is longer than the cap (announced, or read past it).
    TooLarge,
    /// The request could not be made, or the answer not read (a timeout of
    /// the client among them).
    Http(reqwest::Error),
}

/// Sends a request of the `oauth2` or `openidconnect` crate (they let their
/// caller make the exchange) through `http`, whose timeouts bound it, and
/// reads at most `limit` bytes of the answer.
pub(crate) async fn send_capped(
    http: &reqwest::Client,
    request: oauth2::HttpRequest,
    limit: usize,
) -> Result<oauth2::HttpResponse, Capped> {
    let request = reqwest::Request::try_from(request).map_err(Capped::Http)?;
    let res = http.execute(request).await.map_err(Capped::Http)?;
    let status = res.status();
    let headers = res.headers().clone();
    let body = read_capped(res, limit).await?;
    let mut answer = oauth2::HttpResponse::new(body);
    *answer.status_mut() = status;
    *answer.headers_mut() = headers;
    Ok(answer)
}

/// Reads at most `limit` bytes of a body, refusing a longer one as soon as
/// its length is announced or its bytes pass the limit.
pub(crate) async fn read_capped(
    mut res: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, Capped> {
    if res.content_length().is_some_and(|n| n > limit as u64) {
        return Err(Capped::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = res.chunk().await.map_err(Capped::Http)? {
        if body.len() + chunk.len() > limit {
            return Err(Capped::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
