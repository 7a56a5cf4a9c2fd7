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

/// §14 at the CS: a CHEQ asking for the user's passkey is not accepted
/// without one, on the page (which says so and links to the account page)
/// or through the voice API (which cannot carry one); it can be rejected.
#[actix_web::test]
async fn a_cheq_asking_for_a_passkey_is_not_accepted_without_one() {
    const GW_SECRET: &str = "voice-gateway-secret-0123";
    const PIN: &str = "432109";
    let env = Env::start(Options {
        rs_toml_tables: "\n[policy]\npasskey_tools = [\"book_flight\"]\n".into(),
        gateways: vec![Gateway::new("voice-gw", GW_SECRET)],
        ..Options::default()
    })
    .await;
    env.set_pin("alice", PIN);
    let mut b = env.browser();
    let pack = env.invoke().await;
    assert!(payload_of(&env.fetch_cheq(&pack.resource_uri).await.1)["assurance"] == "passkey");
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.raw.contains("id=\"passkey-needed\""), "{}", page.raw);
    let id = path.trim_start_matches("/c/");
    assert!(
        page.raw
            .contains(&format!("href=\"/account?back=%2Fc%2F{id}\"")),
        "{}",
        page.raw
    );
    assert!(page.raw.contains("data-passkey-decision="));
    // Options for an account without a passkey: refused, named.
    let csrf = page.hidden("csrf").unwrap();
    let view = page.hidden("view").unwrap();
    let req = b
        .http
        .post(b.url(&format!("{path}/passkey")))
        .form(&[("csrf", csrf.as_str()), ("view", view.as_str())]);
    let options = b.page(req).await;
    assert_eq!(
        error_of(&options),
        (403, "passkey_required".into()),
        "{}",
        options.raw
    );
    // Accept without an assertion (no script): refused, nothing signed.
    let accepted = b.decide(&path, &page, "accept").await;
    assert_eq!(accepted.status, 403, "{}", accepted.text);
    assert!(accepted.text.contains("passkey"), "{}", accepted.text);
    assert!(env.records("alice").is_empty());
    // A made-up assertion for a credential that is not hers: refused.
    let forged = b
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("view", &view),
                ("decision", "accept"),
                ("passkey_id", "bm90LWhlcnM"),
                ("passkey_client_data", "e30"),
                ("passkey_authenticator_data", "AAAA"),
                ("passkey_signature", "AAAA"),
            ],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.text);
    assert!(env.records("alice").is_empty());

    // The voice API cannot carry a passkey: accepting is refused, named.
    let pack2 = env.invoke().await;
    let gw = env.voice(&Gateway::new("voice-gw", GW_SECRET));
    let token = gw.user_token("alice", PIN).await;
    let created = gw.create(Some(&token), &pack2.resource_uri).await;
    created.expect(201, "create");
    let id = created.body["id"].as_str().unwrap().to_owned();
    let refused = gw
        .decide(Some(&token), &id, &json!({"decision": "accept"}))
        .await;
    assert_eq!(refused.status, 403, "{}", refused.raw);
    assert_eq!(refused.body["error"], "passkey_required", "{}", refused.raw);
    // Rejecting needs no passkey.
    let rejected = gw
        .decide(Some(&token), &id, &json!({"decision": "reject"}))
        .await;
    assert_eq!(rejected.status, 200, "{}", rejected.raw);
    env.stop().await;
}

/// The page of a CHEQ that asks for a passkey the user lacks links to the
/// account page with itself as the return target; the account page then
/// leads back there ("Back to the confirmation"), also through a sign-in
/// again. A target that is not a confirmation page of this CS (another
/// site, another page) is ignored: no open redirect.
#[actix_web::test]
async fn the_account_page_leads_back_to_the_confirmation_and_nowhere_else() {
    let clock = std::sync::Arc::new(cheq::time::ManualClock::new(chrono::Utc::now()));
    let env = Env::start(Options {
        clock: Some(clock),
        rs_toml_tables: "\n[policy]\npasskey_tools = [\"book_flight\"]\n".into(),
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    let pack = env.invoke().await;
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert!(page.raw.contains("id=\"passkey-needed\""), "{}", page.raw);
    let add = page.link("/account?back=").unwrap();

    // Followed: the account page offers the way back, and carries it to
    // the script that adds the passkey.
    let account = b.get(&add).await;
    assert_eq!(account.status, 200, "{}", account.text);
    let back = format!("href=\"{path}\" id=\"back-to-confirmation\"");
    assert!(account.text.contains(&back), "{}", account.text);
    assert!(account.text.contains("Back to the confirmation"));
    assert!(
        account.text.contains(&format!("data-back=\"{path}\"")),
        "{}",
        account.text
    );
    // Once a passkey is added (the script comes back with ?added=1).
    let added = b.get(&format!("{add}&added=1")).await;
    assert!(added.text.contains("The passkey was added."));
    assert!(added.text.contains(&back), "{}", added.text);

    // Six minutes on, adding needs a sign-in again: it comes back to the
    // account page with the return target.
    env.advance(360);
    let stale = b.get(&add).await;
    let again = stale
        .link("/login?reauth=300")
        .unwrap_or_else(|| panic!("{}", stale.text));
    let id = path.trim_start_matches("/c/");
    assert_eq!(
        again,
        format!("/login?reauth=300&next=%2Faccount%3Fback%3D%252Fc%252F{id}")
    );
    assert!(stale.text.contains(&back), "{}", stale.text);
    let signed = b.login_at(&again, "alice", ALICE_PW).await;
    assert_eq!(signed.status, 303, "{}", signed.text);
    assert_eq!(signed.location(), format!("/account?back=%2Fc%2F{id}"));
    let fresh = b.get(&signed.location()).await;
    assert!(fresh.text.contains(&back), "{}", fresh.text);
    assert!(fresh.raw.contains("id=\"add-passkey\""), "{}", fresh.raw);

    // Anything else is no return target: the page shows no way "back".
    for target in [
        "https://evil.example/".to_owned(),
        "//evil.example/".to_owned(),
        format!("https://evil.example{path}"),
        format!("//evil.example{path}"),
        format!("/\\evil.example{path}"),
        format!("{path}/../../history"),
        format!("{path}/passkey"),
        "/history".to_owned(),
        "javascript:alert(1)".to_owned(),
    ] {
        let q = serde_urlencoded::to_string([("back", target.as_str())]).unwrap();
        let page = b.get(&format!("/account?{q}")).await;
        assert_eq!(page.status, 200, "{target}: {}", page.text);
        assert!(
            !page.text.contains("back-to-confirmation") && !page.text.contains("data-back"),
            "{target}: {}",
            page.text
        );
        assert!(!page.text.contains("evil.example"), "{target}");
    }
    env.stop().await;
}
