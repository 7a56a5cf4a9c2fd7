//! The passkey routes of the CS over HTTP, each refusal on its own: the
//! page's CSRF token, a sign-in of the last 5 minutes (on the manual clock),
//! the pre-login cookie of a passkey sign-in, a ceremony this CS did not
//! begin, bodies that are not JSON. What a real authenticator does is in
//! `tests/browser/passkeys.test.mjs` (Chromium's virtual authenticator);
//! the ceremonies' checks are unit tests of `cheq-confirm`'s `passkeys`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use serde_json::{json, Value};

async fn post_json(b: &mut Browser, path: &str, body: Value) -> Page {
    let req = b.http.post(b.url(path)).json(&body);
    b.page(req).await
}

fn error_of(page: &Page) -> (u16, String) {
    let v: Value = serde_json::from_str(&page.raw).unwrap_or(Value::Null);
    (page.status, v["error"].as_str().unwrap_or("").to_owned())
}

#[actix_web::test]
async fn adding_a_passkey_needs_the_pages_token_and_a_recent_sign_in() {
    let clock = std::sync::Arc::new(cheq::time::ManualClock::new(chrono::Utc::now()));
    let env = Env::start(Options {
        clock: Some(clock),
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    // Not signed in: the account page sends to the sign-in.
    let res = b.get("/account").await;
    assert_eq!(res.status, 303, "{}", res.text);
    assert!(res.location().starts_with("/login"), "{}", res.location());

    b.sign_in("alice", ALICE_PW).await;
    let page = b.get("/account").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.raw.contains("id=\"add-passkey\""), "{}", page.raw);
    assert!(page.raw.contains("src=\"/static/passkey.js\""));
    let csrf = page.hidden("csrf").unwrap();

    let no_token = post_json(&mut b, "/account/passkeys/begin", json!({"name": "x"})).await;
    assert_eq!(
        error_of(&no_token),
        (403, "csrf".into()),
        "{}",
        no_token.raw
    );
    let begun = post_json(
        &mut b,
        "/account/passkeys/begin",
        json!({"csrf": csrf, "name": "laptop"}),
    )
    .await;
    assert_eq!(begun.status, 200, "{}", begun.raw);
    let v: Value = serde_json::from_str(&begun.raw).unwrap();
    assert_eq!(
        v["options"]["authenticatorSelection"]["userVerification"],
        "required"
    );
    assert_eq!(v["options"]["rp"]["id"], "127.0.0.1");
    assert!(v["ceremony"].as_str().unwrap().len() > 40);
    let bad_name = post_json(
        &mut b,
        "/account/passkeys/begin",
        json!({"csrf": csrf, "name": ""}),
    )
    .await;
    assert_eq!(
        error_of(&bad_name),
        (400, "passkey_refused".into()),
        "{}",
        bad_name.raw
    );

    // A ceremony this CS did not begin, and bodies that are not JSON.
    let forged = post_json(
        &mut b,
        "/account/passkeys/finish",
        json!({"csrf": csrf, "ceremony": "AAAA", "id": "AA", "client_data": "e30", "attestation_object": "oA"}),
    )
    .await;
    assert_eq!(error_of(&forged), (400, "expired".into()), "{}", forged.raw);
    let req = b
        .http
        .post(b.url("/account/passkeys/finish"))
        .header("content-type", "application/json")
        .body("{not json");
    let garbled = b.page(req).await;
    assert_eq!(
        error_of(&garbled),
        (400, "invalid_request".into()),
        "{}",
        garbled.raw
    );

    // Six minutes on: sign in again first.
    env.advance(360);
    let stale = post_json(
        &mut b,
        "/account/passkeys/begin",
        json!({"csrf": csrf, "name": "laptop"}),
    )
    .await;
    assert_eq!(
        error_of(&stale),
        (403, "reauthenticate".into()),
        "{}",
        stale.raw
    );
    let v: Value = serde_json::from_str(&stale.raw).unwrap();
    assert_eq!(v["reauth"], "/login?reauth=300&next=%2Faccount");
    let page = b.get("/account").await;
    assert!(page.raw.contains("id=\"reauth-needed\""), "{}", page.raw);
    assert!(!page.raw.contains("id=\"add-passkey\""));
    let removed = b
        .post("/account/passkeys/remove", &[("csrf", &csrf), ("id", "x")])
        .await;
    assert_eq!(removed.status, 303);
    assert_eq!(removed.location(), "/login?reauth=300&next=%2Faccount");
    env.stop().await;
}

#[actix_web::test]
async fn a_passkey_sign_in_is_bound_to_the_login_pages_cookie() {
    let env = Env::start(Options::default()).await;
    let mut b = env.browser();
    // No pre-login cookie: refused.
    let res = post_json(&mut b, "/login/passkey/begin", json!({"csrf": "x"})).await;
    assert_eq!(error_of(&res), (403, "csrf".into()), "{}", res.raw);
    let form = b.get("/login").await;
    assert!(form.raw.contains("id=\"passkey-sign-in\""), "{}", form.raw);
    let csrf = form.hidden("csrf").unwrap();
    let res = post_json(&mut b, "/login/passkey/begin", json!({"csrf": "wrong"})).await;
    assert_eq!(error_of(&res), (403, "csrf".into()));
    let res = post_json(&mut b, "/login/passkey/begin", json!({"csrf": csrf})).await;
    assert_eq!(res.status, 200, "{}", res.raw);
    let v: Value = serde_json::from_str(&res.raw).unwrap();
    assert_eq!(v["options"]["allowCredentials"], json!([]));
    let ceremony = v["ceremony"].as_str().unwrap().to_owned();
    // An answer for nobody's passkey: refused, and no session.
    let res = post_json(
        &mut b,
        "/login/passkey/finish",
        json!({"csrf": csrf, "ceremony": ceremony, "id": "AAAA", "client_data": "e30",
               "authenticator_data": "AAAA", "signature": "AAAA", "user_handle": "nobody"}),
    )
    .await;
    assert_eq!(
        error_of(&res),
        (400, "passkey_refused".into()),
        "{}",
        res.raw
    );
    assert!(!b.get("/history").await.location().is_empty());
    // The ceremony of another browser (another pre-login cookie) is refused.
    let mut other = env.browser();
    let form2 = other.get("/login").await;
    let csrf2 = form2.hidden("csrf").unwrap();
    let res = post_json(
        &mut other,
        "/login/passkey/finish",
        json!({"csrf": csrf2, "ceremony": ceremony, "id": "AAAA", "client_data": "e30",
               "authenticator_data": "AAAA", "signature": "AAAA", "user_handle": "nobody"}),
    )
    .await;
    assert_eq!(error_of(&res), (400, "expired".into()), "{}", res.raw);
    // The script is served from the CS, and the CSP lets only such scripts run.
    let js = b.get("/static/passkey.js").await;
    assert_eq!(js.status, 200);
    assert!(js
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));
    let csp = form.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    env.stop().await;
}
