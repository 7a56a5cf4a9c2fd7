//! The confirmation server (CS) end to end, with the reference resource server
//! (RS), both on real loopback sockets: the browser flow (§2, §3, §5, §6), the
//! replay rules (§6), refusal of unregistered resource URIs (§2), sessions,
//! CSRF, security headers, history and evidence, rate limiting, and crash and
//! restart of both servers as real processes. The harness is in
//! `tests/common/mod.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::configfile::ServerConfig as _;
use common::*;

use cheq::keyfile::load_or_create_key;
use cheq::sign::{
    assemble, countersign, verify_decision, verify_resource, Channel, Context, Decision,
    DecisionInput, Jwks, TrustStore,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// 1. The browser flow, accept and reject
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn accept_runs_the_operation_once() {
    let env = Env::start(Options::default()).await;
    let pack = env.invoke().await;
    assert!(pack
        .resource_uri
        .starts_with(&format!("{}/cheq/", env.rs_url)));
    assert_eq!(result_of(&pack.result_uri).await.0, 202);

    let mut b = env.browser();
    // Not signed in: §2 sends the user through login first.
    let res = b
        .post(START, &[("resource_uri", pack.resource_uri.as_str())])
        .await;
    assert_eq!(res.status, 303, "{}", res.text);
    let to_login = res.location();
    assert!(to_login.starts_with("/login?next="), "{to_login}");
    let res = b.login_at(&to_login, "alice", ALICE_PW).await;
    assert_eq!(res.status, 303, "{}", res.text);
    // The sign-in that followed the POST goes straight on to the page.
    let path = res.location();
    assert!(path.starts_with("/c/"), "{path}");
    let page = b.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.text);

    // What the page shows.
    assert!(page.text.contains("UA23"), "{}", page.text);
    assert!(page.text.contains("Book a flight"));
    assert!(
        page.text.contains(&format!(
            "Requested by</dt><dd class=\"origin\">{}",
            env.rs_url
        )),
        "the RS origin is shown: {}",
        page.text
    );
    // A person reads the operation's name; its address is for programs,
    // shown smaller beneath it.
    let operation = payload_of(&env.fetch_cheq(&pack.resource_uri).await.1)["operation"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        page.raw.contains(&format!(
            "<dt>Operation</dt><dd>Book a flight<span class=\"for-programs\">address, for programs: <code>{operation}</code></span></dd>"
        )),
        "{}",
        page.raw
    );
    assert!(page.raw.contains("<html lang=\"en\">"), "{}", page.raw);
    assert!(
        page.text.contains(&format!(
            "This page belongs to the confirmation service at <strong>{}</strong>, not to the AI agent.",
            env.cs_origin
        )),
        "{}",
        page.text
    );
    let (status, doc) = env.fetch_cheq(&pack.resource_uri).await;
    assert_eq!(status, 200);
    let expires =
        chrono::DateTime::parse_from_rfc3339(payload_of(&doc)["expires"].as_str().unwrap())
            .unwrap();
    let shown = {
        let marker = "<time datetime=\"";
        let start = page.raw.find(marker).expect("a <time> element") + marker.len();
        let end = page.raw[start..].find('"').unwrap() + start;
        page.raw[start..end].to_owned()
    };
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(&shown).unwrap(),
        expires,
        "the expiry shown is the CHEQ's"
    );
    assert!(page.text.contains(&format!(">{shown}</time>")));
    assert_eq!(page.raw.matches("name=\"decision\"").count(), 2);
    assert_eq!(env.rs.executions(), 0);
    // The store keeps which resource URI the page is for, and no copy of
    // the document (the verified CHEQ is kept in memory for the decision).
    let id = path.trim_start_matches("/c/");
    let entry = env.cs.cs.started(id).unwrap().expect("a started entry");
    assert_eq!(entry.resource_uri, pack.resource_uri);
    assert_eq!(entry.document, None);

    let outcome = b.decide(&path, &page, "accept").await;
    assert_eq!(outcome.status, 200, "{}", outcome.text);
    assert!(
        outcome.text.contains("you chose to accept"),
        "{}",
        outcome.text
    );
    assert!(!outcome.text.contains("Already decided"));
    assert!(outcome.text.contains("delivered"), "{}", outcome.text);
    assert!(outcome.text.contains("Download the signed decision"));
    assert!(!outcome.text.contains("redacted evidence"));
    assert_eq!(env.rs.executions(), 1);
    // Once decided, the entry still finds the decision.
    let again = b.get(&path).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert!(again.text.contains("Already decided"), "{}", again.text);

    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "accepted");
    let outputs = body["result"]["output_parameters"].as_array().unwrap();
    assert!(outputs.contains(&json!({"name": "status", "value": "CONFIRMED"})));
    assert!(outputs.contains(&json!({"name": "flight_number", "value": "UA23"})));
    env.stop().await;
}

#[actix_web::test]
async fn reject_runs_nothing() {
    let env = Env::start(Options::default()).await;
    let mut b = env.browser();
    let (pack, _, page, outcome) = env.decided(&mut b, "reject").await;
    assert!(page.text.contains("UA23"));
    assert!(
        outcome.text.contains("you chose to reject"),
        "{}",
        outcome.text
    );
    assert!(outcome.text.contains("delivered"), "{}", outcome.text);
    assert_eq!(env.rs.executions(), 0);
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!((status, body), (200, json!({"status": "rejected"})));
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 2. A replayed URI pack shows the earlier decision; no second signature
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn replayed_uri_pack_shows_the_earlier_decision() {
    let env = Env::start(Options::default()).await;
    let mut b = env.browser();
    let (pack, path, page, outcome) = env.decided(&mut b, "accept").await;
    assert_eq!(env.rs.executions(), 1);
    let evidence_link = outcome.link("/history/").expect("an evidence link");
    let before = b.get(&evidence_link).await;
    assert_eq!(before.status, 200);
    let records_before = env.records("alice");
    assert_eq!(records_before.len(), 1);

    // The same URI pack again, as a (signed-in) user app would post it.
    let res = b
        .post(START, &[("resource_uri", pack.resource_uri.as_str())])
        .await;
    assert_eq!(res.status, 303);
    assert_eq!(res.location(), path, "the same confirmation page");
    let again = b.get(&path).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert!(again.text.contains("Already decided"), "{}", again.text);
    assert!(again.text.contains("you chose to accept"));
    assert!(
        !again.raw.contains("name=\"decision\""),
        "no new decision form"
    );

    // The old form re-posted with the opposite decision.
    let replay = b.decide(&path, &page, "reject").await;
    assert_eq!(replay.status, 200, "{}", replay.text);
    assert!(replay.text.contains("Already decided"), "{}", replay.text);
    assert!(replay.text.contains("you chose to accept"));
    assert!(!replay.text.contains("you chose to reject"));

    let after = b.get(&evidence_link).await;
    assert_eq!(after.raw, before.raw, "the evidence is unchanged");
    assert_eq!(
        env.records("alice"),
        records_before,
        "the record is unchanged"
    );
    let history = b.get("/history").await;
    assert_eq!(history.raw.matches("href=\"/history/").count(), 1);
    assert_eq!(env.rs.executions(), 1);
    let (_, body) = result_of(&pack.result_uri).await;
    assert_eq!(body["status"], "accepted");
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 3. A decided CHEQ with another confirmation signature: 409 at the RS
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn another_countersignature_of_a_decided_cheq_is_a_replay() {
    let env = Env::start(Options::default()).await;
    let mut b = env.browser();
    let (pack, _, _, outcome) = env.decided(&mut b, "accept").await;
    assert_eq!(env.rs.executions(), 1);
    let evidence = b.get(&outcome.link("/history/").unwrap()).await;
    assert_eq!(evidence.status, 200);
    let decided = evidence.raw;

    // Rebuild the resource-signed CHEQ and countersign it again, with the
    // CS key read from the CS signing key file.
    let payload_b64 = serde_json::from_str::<Value>(&decided).unwrap()["payload"]
        .as_str()
        .unwrap()
        .to_owned();
    let (protected, signature) = signature_of(&decided, 0);
    let resource_signed = assemble(&payload_b64, &[(&protected, &signature)]);
    let now = chrono::Utc::now();
    let ctx = Context {
        now,
        resource_uri: Some(&pack.resource_uri),
        confirmation_uri: Some(&env.cs_url),
    };
    let verified = verify_resource(resource_signed.as_bytes(), &env.trust(), &ctx).unwrap();
    let cs_key = load_or_create_key(&env.cs_key_path, None, "cs").unwrap();
    let amr = vec!["pwd".to_owned()];
    let sign = |decision| {
        countersign(
            &verified,
            &cs_key,
            DecisionInput {
                decision,
                sub: "alice",
                also_known_as: &[],
                auth_time: now.timestamp() - 5,
                amr: &amr,
                channel: Channel::Html,
                view_text: "another view",
                collected: None,
                passkey: None,
            },
            now,
        )
        .unwrap()
    };
    for (decision, query) in [(Decision::Accept, "accept"), (Decision::Reject, "reject")] {
        let doc = sign(decision);
        assert_ne!(doc, decided);
        // It is a well-signed decision in itself…
        verify_decision(
            doc.as_bytes(),
            &env.trust(),
            Some(decision),
            &Context::at(now),
        )
        .unwrap();
        // …but its nonce was decided.
        let (status, body) = env.post_decision(&pack.resource_uri, query, &doc).await;
        assert_eq!(status, 409, "{query}: {body}");
        assert_eq!(body["error"], "replayed");
    }
    assert_eq!(env.rs.executions(), 1);
    // The byte-identical delivery is answered as before, still without a run.
    let (status, body) = env
        .post_decision(&pack.resource_uri, "accept", &decided)
        .await;
    assert_eq!((status, body), (200, json!({"status": "accepted"})));
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 4. A CHEQ that fails verification is shown as untrustworthy
// ---------------------------------------------------------------------------

fn assert_untrusted(page: &Page) {
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(page.text.contains("Do not trust"), "{}", page.text);
    assert!(page.text.contains("Nothing was signed"), "{}", page.text);
    assert!(!page.raw.contains("name=\"decision\""), "{}", page.raw);
    assert!(!page.text.contains("UA23") && !page.text.contains("UA99"));
}

#[actix_web::test]
async fn a_cheq_that_does_not_verify_gets_no_accept_button() {
    let fake_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_origin = format!(
        "http://127.0.0.1:{}",
        fake_listener.local_addr().unwrap().port()
    );
    // The RS is registered with another key under its kid; a tampering RS is
    // registered with the real RS's key.
    let env = Env::start(Options {
        wrong_rs_key: true,
        extra: vec![ExtraRs {
            origin: fake_origin.clone(),
        }],
        ..Options::default()
    })
    .await;
    let fake = start_tampering_rs(fake_listener, env.rs_url.clone(), fake_origin.clone());
    let mut b = env.browser();

    // (a) Signed by a key the CS does not trust for that origin.
    let pack = env.invoke().await;
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_untrusted(&page);
    assert!(page.text.contains(&env.rs_url), "{}", page.text);
    // Posting a decision anyway (with a valid CSRF token) signs nothing.
    let csrf = b.get("/history").await.hidden("csrf").unwrap();
    let res = b
        .post(
            &path,
            &[("csrf", &csrf), ("view", "x"), ("decision", "accept")],
        )
        .await;
    assert_untrusted(&res);

    // (b) The payload altered on the way (a tampering RS).
    let pack2 = env.invoke().await;
    let path2 = pack2.resource_uri.replace(&env.rs_url, &fake_origin);
    let (_, page) = b.open(START, &path2, "alice", ALICE_PW).await;
    assert_untrusted(&page);
    assert!(page.text.contains("rule 1"), "{}", page.text);

    assert!(env.records("alice").is_empty());
    assert_eq!(env.rs.executions(), 0);
    assert_eq!(result_of(&pack.result_uri).await.0, 202);
    assert_eq!(result_of(&pack2.result_uri).await.0, 202);
    fake.stop(true).await;
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 5. Unregistered resource URIs are refused without a request leaving the CS
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn unregistered_resource_uris_are_never_fetched() {
    let registered = Counter::start();
    let unregistered = Counter::start();
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: registered.origin(),
        }],
        ..Options::default()
    })
    .await;
    let reg = registered.origin();
    let refused = [
        format!("{}/cheq/confirmations/x", unregistered.origin()),
        format!("http://localhost:{}/cheq/confirmations/x", registered.port),
        format!("{reg}/admin"),
        format!("{reg}/oauth/token"),
        format!("{reg}/cheq/"),
        format!("{reg}/cheq/../oauth/token"),
        format!("{reg}/cheq/%2e%2e/oauth/token"),
        format!("{}/tools/book_flight", env.rs_url),
        format!("{}/cheq/../oauth/token", env.rs_url),
        "file:///etc/passwd".to_owned(),
    ];
    let mut b = env.browser();
    let mut signed_in = env.browser();
    signed_in.sign_in("alice", ALICE_PW).await;
    for uri in &refused {
        for who in [&mut b, &mut signed_in] {
            let page = who.post(START, &[("resource_uri", uri.as_str())]).await;
            assert_eq!(page.status, 400, "{uri}: {}", page.text);
            assert!(
                page.text.contains("did not contact it"),
                "{uri}: {}",
                page.text
            );
            assert!(page.header("location").is_none());
            // The same as a query parameter (the link an agent prints).
            let q = serde_urlencoded::to_string([("resource_uri", uri)]).unwrap();
            let page = who.get(&format!("{START}?{q}")).await;
            assert_eq!(page.status, 400, "{uri} (query): {}", page.text);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        unregistered.count(),
        0,
        "a request reached an unregistered server"
    );
    assert_eq!(registered.count(), 0, "a request left for a refused URI");

    // Control: a URI under the registered prefix is fetched (the counter
    // counts), and its failure is shown as such.
    let (_, page) = signed_in
        .open(
            START,
            &format!("{reg}/cheq/confirmations/x"),
            "alice",
            ALICE_PW,
        )
        .await;
    assert_eq!(page.status, 502, "{}", page.text);
    assert!(!page.raw.contains("name=\"decision\""));
    assert!(registered.count() > 0);
    assert_eq!(unregistered.count(), 0);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 6. Another user's confirmation: 403
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn wrong_user_gets_403() {
    let env = Env::start(Options::default()).await;
    env.add_user("bob", BOB_PW);
    let pack = env.invoke().await;

    let mut bob = env.browser();
    let (path, page) = bob.open(START, &pack.resource_uri, "bob", BOB_PW).await;
    assert_eq!(page.status, 403, "{}", page.text);
    assert!(
        page.text
            .contains("This request belongs to another account; you are signed in as \"bob\"."),
        "{}",
        page.text
    );
    assert!(!page.raw.contains("name=\"decision\""));
    assert!(!page.text.contains("UA23"));
    assert!(!page.text.contains("alice"), "the owner is not named");
    // Bob posting a decision anyway.
    let csrf = bob.get("/history").await.hidden("csrf").unwrap();
    let res = bob
        .post(
            &path,
            &[("csrf", &csrf), ("view", "x"), ("decision", "accept")],
        )
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
    assert!(env.records("alice").is_empty() && env.records("bob").is_empty());
    assert_eq!(env.rs.executions(), 0);
    assert_eq!(result_of(&pack.result_uri).await.0, 202);

    // Alice decides; bob still sees nothing of it.
    let mut alice = env.browser();
    let (path_a, page) = alice
        .open(START, &pack.resource_uri, "alice", ALICE_PW)
        .await;
    assert_eq!(path_a, path);
    assert_eq!(alice.decide(&path, &page, "accept").await.status, 200);
    let page = bob.get(&path).await;
    assert_eq!(page.status, 403, "{}", page.text);
    assert!(
        page.text.contains("belongs to another account"),
        "{}",
        page.text
    );
    assert!(
        !page.text.contains("alice"),
        "the owner is not named: {}",
        page.text
    );
    assert!(!bob.get("/history").await.raw.contains("href=\"/history/"));
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 7. CSRF on the decision form and on the login form
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn csrf_missing_or_wrong_is_refused() {
    let env = Env::start(Options::default()).await;
    env.add_user("bob", BOB_PW);
    let pack = env.invoke().await;

    // The login form.
    let mut b = env.browser();
    let form = b.get("/login").await;
    let pre_login_csrf = form.hidden("csrf").unwrap();
    let mut other = env.browser();
    let other_csrf = other.get("/login").await.hidden("csrf").unwrap();
    assert_ne!(other_csrf, pre_login_csrf);
    for csrf in [None, Some(""), Some("AAAA"), Some(other_csrf.as_str())] {
        let mut fields = vec![
            ("username", "alice"),
            ("password", ALICE_PW),
            ("next", "/history"),
        ];
        if let Some(c) = csrf {
            fields.push(("csrf", c));
        }
        let res = b.post("/login", &fields).await;
        assert_eq!(res.status, 403, "login with csrf {csrf:?}: {}", res.text);
        assert!(res.text.contains("security token"), "{}", res.text);
    }
    // With no session at all.
    let mut stranger = env.browser();
    let res = stranger
        .post(
            "/login",
            &[
                ("username", "alice"),
                ("password", ALICE_PW),
                ("csrf", &pre_login_csrf),
                ("next", "/history"),
            ],
        )
        .await;
    assert_eq!(res.status, 403, "{}", res.text);
    // None of that signed in.
    assert_eq!(b.get("/history").await.status, 303);

    // The decision form.
    let (path, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let view = page.hidden("view").unwrap();
    let mut bob = env.browser();
    bob.sign_in("bob", BOB_PW).await;
    let bobs_csrf = bob.get("/history").await.hidden("csrf").unwrap();
    for csrf in [
        None,
        Some(""),
        Some("AAAA"),
        Some(bobs_csrf.as_str()),
        // The token of the session from before login (the id changed).
        Some(pre_login_csrf.as_str()),
    ] {
        let mut fields = vec![("view", view.as_str()), ("decision", "accept")];
        if let Some(c) = csrf {
            fields.push(("csrf", c));
        }
        let res = b.post(&path, &fields).await;
        assert_eq!(res.status, 403, "decision with csrf {csrf:?}: {}", res.text);
        assert!(res.text.contains("security token"), "{}", res.text);
    }
    assert!(env.records("alice").is_empty(), "nothing was signed");
    assert_eq!(env.rs.executions(), 0);
    let (status, body) = result_of(&pack.result_uri).await;
    assert_eq!((status, body), (202, json!({"status": "pending"})));

    // Control: the right token works.
    let res = b.decide(&path, &page, "accept").await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 8. Security headers and the session cookie
// ---------------------------------------------------------------------------

fn assert_security_headers(page: &Page, what: &str) {
    let csp = page
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no CSP"));
    assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(
        page.header("x-frame-options").as_deref(),
        Some("DENY"),
        "{what}"
    );
    assert_eq!(
        page.header("referrer-policy").as_deref(),
        Some("no-referrer"),
        "{what}"
    );
    assert_eq!(
        page.header("cache-control").as_deref(),
        Some("no-store"),
        "{what}"
    );
    assert_eq!(
        page.headers.get_all("cache-control").iter().count(),
        1,
        "{what}"
    );
}

#[actix_web::test]
async fn security_headers_and_session_cookie() {
    let env = Env::start(Options::default()).await;
    let pack = env.invoke().await;
    let mut b = env.browser();

    let res = b
        .post(START, &[("resource_uri", pack.resource_uri.as_str())])
        .await;
    let form = b.get(&res.location()).await;
    assert_security_headers(&form, "login page");
    // The start's answer set the pre-login cookie (its POST is carried
    // through sign-in); the login page keeps it.
    assert!(form.set_cookies().is_empty(), "{:?}", form.set_cookies());
    let cookies = res.set_cookies();
    assert_eq!(cookies.len(), 1, "{cookies:?}");
    let cookie = &cookies[0];
    assert!(cookie.starts_with("cheq_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    let before = b.session.clone().unwrap();

    let res = b
        .post(
            "/login",
            &[
                ("username", "alice"),
                ("password", ALICE_PW),
                ("csrf", &form.hidden("csrf").unwrap()),
                ("next", &form.hidden("next").unwrap()),
            ],
        )
        .await;
    assert_eq!(res.status, 303, "{}", res.text);
    let cookie = res
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("cheq_session="))
        .expect("a new session cookie at login");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let after = b.session.clone().unwrap();
    assert_ne!(before, after, "the session id changes at login");
    // The old id is dead.
    let mut old = env.browser();
    old.session = Some(before);
    assert_eq!(old.get("/history").await.status, 303);

    let path = b.after_login(res.location()).await;
    let page = b.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert_security_headers(&page, "confirmation page");

    let error = b
        .post(START, &[("resource_uri", "http://127.0.0.1:9/cheq/x")])
        .await;
    assert_eq!(error.status, 400);
    assert_security_headers(&error, "error page");
    let missing = b.get("/no/such/page").await;
    assert_eq!(missing.status, 404);
    assert_security_headers(&missing, "404 page");
    let outcome = b.decide(&path, &page, "reject").await;
    assert_security_headers(&outcome, "outcome page");
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 11. History and evidence
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn history_lists_decisions_and_evidence_verifies() {
    let env = Env::start(Options::default()).await;
    env.add_user("bob", BOB_PW);
    let mut b = env.browser();
    let (pack, _, page, outcome) = env.decided(&mut b, "accept").await;

    let history = b.get("/history").await;
    assert_eq!(history.status, 200);
    assert!(
        !history.text.contains("Decisions are kept"),
        "kept for good"
    );
    let row = {
        let start = history.text.find("<tbody>").expect("a table of decisions");
        let end = history.text[start..].find("</tbody>").unwrap() + start;
        history.text[start..end].to_owned()
    };
    assert_eq!(row.matches("<tr>").count(), 1, "{row}");
    for fact in [
        "Book a flight",
        env.rs_url.as_str(),
        ">accept<",
        ">delivered<",
    ] {
        assert!(row.contains(fact), "{fact} missing from {row}");
    }
    let link = history.link("/history/").unwrap();
    assert_eq!(Some(link.clone()), outcome.link("/history/"));

    let evidence = b.get(&link).await;
    assert_eq!(evidence.status, 200);
    assert_eq!(
        evidence.header("content-type").as_deref(),
        Some("application/jose+json")
    );
    let doc = evidence.raw.clone();
    let v: Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(v["signatures"].as_array().unwrap().len(), 2);
    let nonce = payload_of(&doc)["nonce"].as_str().unwrap().to_owned();
    // The evidence is named by its record: the RS's origin and the nonce (§6).
    let record_id = cheq::store::cs::RecordKey::new(&env.rs_url, &nonce).id();
    assert_eq!(link, format!("/history/{record_id}.json"));

    // With the keys each server publishes.
    let mut trust = TrustStore::new();
    for (url, cs) in [(&env.rs_url, false), (&env.cs_origin, true)] {
        let bytes = reqwest::get(format!("{url}/.well-known/jwks.json"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let jwks = Jwks::from_bytes(&bytes).unwrap();
        if cs {
            trust.add_confirmation_server(url, jwks).unwrap();
        } else {
            trust.add_resource_server(url, jwks).unwrap();
        }
    }
    let ctx = Context {
        now: chrono::Utc::now(),
        resource_uri: Some(&pack.resource_uri),
        confirmation_uri: None,
    };
    let verified = verify_decision(doc.as_bytes(), &trust, Some(Decision::Accept), &ctx).unwrap();
    let claims = verified.claims();
    assert_eq!(claims.sub, "alice");
    assert_eq!(claims.channel, Channel::Html);
    assert_eq!(claims.amr, vec!["pwd".to_owned()]);
    assert_eq!(Some(claims.view.clone()), page.hidden("view"));
    assert_eq!(verified.fields().nonce, nonce);
    assert_eq!(verified.confirmation_kid(), env.cs_key.kid());
    assert!(verify_decision(doc.as_bytes(), &trust, Some(Decision::Reject), &ctx).is_err());

    // Another user's evidence link: 404, as for one that does not exist.
    let mut bob = env.browser();
    bob.sign_in("bob", BOB_PW).await;
    let res = bob.get(&link).await;
    assert_eq!(res.status, 404, "{}", res.text);
    assert!(!res.raw.contains(&v["payload"].as_str().unwrap()[..20]));
    assert_eq!(
        bob.get("/history/AAAAAAAAAAAAAAAAAAAAAA.json").await.status,
        404
    );
    let bob_history = bob.get("/history").await;
    assert!(!bob_history.raw.contains(&link));
    // Signed out: to the login page.
    let res = env.browser().get(&link).await;
    assert_eq!(res.status, 303);
    assert!(res.location().starts_with("/login"));
    env.stop().await;
}

/// `history_days`: a decision goes once it is that old, and not before; after
/// it, its evidence is gone, and its CHEQ, expired by then, is not
/// countersigned again (§6).
#[actix_web::test]
async fn old_decisions_go_after_history_days_and_not_before() {
    let clock = std::sync::Arc::new(cheq::time::ManualClock::new(chrono::Utc::now()));
    let env = Env::start(Options {
        clock: Some(clock),
        cs_toml_top: "history_days = 2".into(),
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    let (pack, _, _, outcome) = env.decided(&mut b, "accept").await;
    let link = outcome.link("/history/").expect("an evidence link");
    assert_eq!(b.get(&link).await.status, 200);
    assert_eq!(env.rs.executions(), 1);
    // The history says how long.
    let history = b.get("/history").await;
    assert!(
        history
            .text
            .contains("Decisions are kept 2 days after they were made"),
        "{}",
        history.text
    );

    env.advance(2 * 86400 - 60);
    assert_eq!(env.cs.cs.collect_history().unwrap(), 0, "not yet");
    assert_eq!(env.records("alice").len(), 1);
    env.advance(120);
    assert_eq!(env.cs.cs.collect_history().unwrap(), 1);
    assert!(env.records("alice").is_empty());
    assert_eq!(env.cs.cs.collect_history().unwrap(), 0, "once");

    // Signed in again (the session has expired): the evidence and the
    // history's row are gone.
    let mut b = env.browser();
    let (_, page) = b.open(START, &pack.resource_uri, "alice", ALICE_PW).await;
    // The same CHEQ again: it has expired, so no decision form, and nothing
    // countersigned or run again.
    assert!(
        page.text.contains("Request expired") || page.text.contains("Request no longer open"),
        "{}",
        page.text
    );
    assert!(!page.raw.contains("name=\"decision\""), "{}", page.text);
    assert_eq!(b.get(&link).await.status, 404);
    let history = b.get("/history").await;
    assert_eq!(history.status, 200);
    assert!(
        !history.raw.contains("href=\"/history/"),
        "{}",
        history.text
    );
    assert!(env.records("alice").is_empty());
    assert_eq!(env.rs.executions(), 1);
    env.stop().await;
}

/// A history shorter than 2 days cannot be configured, from a file or in
/// code: the window is a type only a checked constructor makes, so no CS is
/// built with one; 2 days is accepted.
#[actix_web::test]
async fn a_history_shorter_than_two_days_cannot_be_configured() {
    use cheq::confirm::flow::HistoryWindow;
    for days in [0, 1, 36_501] {
        let e = HistoryWindow::days(days).unwrap_err();
        assert!(e.to_string().contains("history_days"), "{e}");
    }
    let env = Env::start(Options::default()).await;
    let text = std::fs::read_to_string(&env.cs_config).unwrap();
    for days in [1, 0] {
        let e = cheq::confirm::CsConfig::from_toml(&format!("history_days = {days}\n{text}"))
            .unwrap_err();
        assert!(e.to_string().contains("history_days"), "{e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = cheq::confirm::CsConfig::from_toml(&text).unwrap();
    config.data_dir = dir.path().join("cs-2");
    config.history_days = Some(HistoryWindow::days(2).unwrap());
    let built =
        cheq::confirm::build_state(&config, std::sync::Arc::new(cheq::time::SystemClock)).await;
    assert!(built.is_ok(), "2 days refused");
    env.stop().await;
}

// ---------------------------------------------------------------------------
// 12. Failed logins are rate limited
// ---------------------------------------------------------------------------

/// Six wrong passwords from one address lock its logins; the lock ends in
/// time. The servers run on a manual clock: the account's own delay (a real
/// wait) must not eat into the lock, which is a matter of the CS's time.
#[actix_web::test]
async fn wrong_passwords_lock_the_login() {
    let clock = std::sync::Arc::new(cheq::time::ManualClock::new(chrono::Utc::now()));
    let env = Env::start(Options {
        clock: Some(clock.clone()),
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    let form = b.get("/login").await;
    let csrf = form.hidden("csrf").unwrap();
    let attempt = |password: &'static str| {
        [
            ("username", "alice"),
            ("password", password),
            ("csrf", csrf.as_str()),
            ("next", "/history"),
        ]
    };
    for i in 0..6 {
        let res = b.post("/login", &attempt("wrong-password")).await;
        assert_eq!(res.status, 401, "attempt {i}: {}", res.text);
        assert!(res.text.contains("The user name or password is wrong"));
    }
    let res = b.post("/login", &attempt(ALICE_PW)).await;
    assert_eq!(res.status, 429, "{}", res.text);
    let retry: u64 = res
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((1..=900).contains(&retry), "{retry}");
    assert!(b.session.is_some());
    assert_eq!(b.get("/history").await.status, 303, "still signed out");

    // After the lock-out the right password works again.
    clock.advance(chrono::Duration::seconds(i64::try_from(retry).unwrap() + 1));
    let res = b.post("/login", &attempt(ALICE_PW)).await;
    assert_eq!(res.status, 303, "{}", res.text);
    assert_eq!(b.get("/history").await.status, 200);
    env.stop().await;
}

#[test]
fn a_decision_survives_crashes_of_both_servers() {
    let setup = Setup::new();
    let cs_data = setup.path("cs");
    // A user before the first start (no server: the CLI opens the database).
    let (ok, out) = user_add("alice", ALICE_PW, &["--data-dir", &cs_data]);
    assert!(ok, "{out}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut rs = setup.start_rs().await;
        let mut cs = setup.start_cs().await;

        let pack = invoke_flight(&setup.rs_url).await;
        assert_eq!(pack.confirmation_uri, setup.cs_url);
        let mut b = Browser::new(&setup.cs_url);
        let (path, page) = b.open("/", &pack.resource_uri, "alice", ALICE_PW).await;
        assert_eq!(page.status, 200, "{}\n{}", page.text, cs.log());
        assert!(page.text.contains("UA23"));

        // The RS dies before the decision.
        rs.kill();
        let outcome = b.decide(&path, &page, "accept").await;
        assert_eq!(outcome.status, 200, "{}", outcome.text);
        assert!(
            outcome.text.contains("you chose to accept"),
            "{}",
            outcome.text
        );
        assert!(
            outcome.text.to_lowercase().contains("delivery pending"),
            "{}",
            outcome.text
        );

        // The CS dies too, and comes back; then the RS comes back.
        cs.kill();
        let mut cs = setup.start_cs().await;
        let mut rs = setup.start_rs().await;

        // No further user action: the decision arrives.
        let deadline = Instant::now() + Duration::from_secs(40);
        let body = loop {
            let (status, body) = result_of(&pack.result_uri).await;
            if status == 200 {
                break body;
            }
            assert_eq!(status, 202, "{body}");
            assert!(
                Instant::now() < deadline,
                "no decision at the RS within 40 s\nCS log:\n{}\nRS log:\n{}",
                cs.log(),
                rs.log()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        assert_eq!(body["status"], "accepted", "{body}");
        let outputs = body["result"]["output_parameters"].as_array().unwrap();
        assert!(outputs.contains(&json!({"name": "status", "value": "CONFIRMED"})));
        assert!(outputs.contains(&json!({"name": "flight_number", "value": "UA23"})));

        // The CS learns it was delivered (its page says so).
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mut page = b.get(&path).await;
            if page.status == 303 {
                let res = b.login_at(&page.location(), "alice", ALICE_PW).await;
                assert_eq!(res.status, 303, "{}", res.text);
                page = b.get(&path).await;
            }
            assert_eq!(page.status, 200, "{}", page.text);
            assert!(page.text.contains("Already decided"), "{}", page.text);
            if page.text.contains(">delivered<") {
                break;
            }
            assert!(Instant::now() < deadline, "{}", page.text);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        // The operation ran once: one execution on the RS's disk, and the
        // result is stable.
        let (_, again) = result_of(&pack.result_uri).await;
        assert_eq!(again, body);
        rs.kill();
        cs.kill();
    });
    assert_eq!(executions_on_disk(&setup.dir.path().join("rs")), 1);
}

#[test]
fn user_add_works_while_the_server_runs() {
    let setup = Setup::new();
    let cs_config = setup.path("cs.toml");
    let (ok, out) = user_add("alice", ALICE_PW, &["--config", &cs_config]);
    assert!(ok, "before the first start: {out}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut cs = setup.start_cs().await;
        let (ok, out) = user_add("carol", CAROL_PW, &["--config", &cs_config]);
        assert!(ok, "{out}\n{}", cs.log());
        assert!(out.contains("added user carol"), "{out}");
        // Through the admin socket: adding her again is refused by the server.
        let (ok, out) = user_add(
            "carol",
            "another-password",
            &["--data-dir", &setup.path("cs")],
        );
        assert!(!ok, "{out}");
        assert!(out.contains("already exists"), "{out}");

        let mut b = Browser::new(&setup.cs_url);
        let form = b.get("/login").await;
        let res = b
            .post(
                "/login",
                &[
                    ("username", "carol"),
                    ("password", "another-password"),
                    ("csrf", &form.hidden("csrf").unwrap()),
                    ("next", "/history"),
                ],
            )
            .await;
        assert_eq!(res.status, 401, "the first password stays");
        b.sign_in("carol", CAROL_PW).await;
        let history = b.get("/history").await;
        assert_eq!(history.status, 200, "{}", history.text);
        assert!(history.text.contains("Signed in as <strong>carol</strong>"));
        // Alice, added before the first start, too.
        let mut a = Browser::new(&setup.cs_url);
        a.sign_in("alice", ALICE_PW).await;
        cs.kill();
    });
}

// ---------------------------------------------------------------------------
// 13. A resource server that never answers
// ---------------------------------------------------------------------------

#[actix_web::test]
async fn a_silent_resource_server_gets_the_user_an_answer_in_time() {
    // Bound but never accepting: the kernel completes the handshake, the
    // request goes out, and no answer ever comes back.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let origin = format!("http://127.0.0.1:{}", silent.local_addr().unwrap().port());
    let env = Env::start(Options {
        extra: vec![ExtraRs {
            origin: origin.clone(),
        }],
        ..Options::default()
    })
    .await;
    let mut b = env.browser();
    b.sign_in("alice", ALICE_PW).await;
    let uri = format!("{origin}/cheq/confirmations/never-answers");
    let start = b.post(START, &[("resource_uri", uri.as_str())]).await;
    assert_eq!(start.status, 303, "{}", start.text);
    let began = Instant::now();
    let page = b.get(&start.location()).await;
    let took = began.elapsed();
    assert_eq!(page.status, 504, "{}", page.text);
    assert!(
        page.text.contains("did not answer in time"),
        "{}",
        page.text
    );
    assert!(!page.raw.contains("name=\"decision\""));
    // The promise to the user (issue 3): an answer within 15 s.
    assert!(took < Duration::from_secs(15), "the page took {took:?}");
    drop(silent);
    env.stop().await;
}

/// §11: the start link (`<confirmation uri>?resource_uri=…`) is safe to
/// open: its GET never starts a confirmation (no CHEQ is fetched, nothing is
/// stored); it sends a visitor through login and shows a signed-in user the
/// filled-in form, whose POST starts it. An unregistered URI is refused.
#[actix_web::test]
async fn a_get_of_the_start_link_starts_nothing() {
    let env = Env::start(Options::default()).await;
    let pack = env.invoke().await;
    let link = format!(
        "{START}?{}",
        serde_urlencoded::to_string([("resource_uri", pack.resource_uri.as_str())]).unwrap()
    );
    let mut b = env.browser();
    let res = b.get(&link).await;
    assert_eq!(res.status, 303, "{}", res.text);
    assert!(
        res.location().starts_with("/login?next="),
        "{}",
        res.location()
    );

    b.sign_in("alice", ALICE_PW).await;
    for _ in 0..3 {
        let res = b.get(&link).await;
        assert_eq!(res.status, 200, "{}", res.text);
        assert!(res.text.contains(&pack.resource_uri), "{}", res.text);
        assert!(
            !res.text.contains("UA23"),
            "no CHEQ was shown: {}",
            res.text
        );
        // One button that says who asks; no box holding a raw URI.
        assert!(
            res.text.contains(&format!(
                "request by <strong class=\"origin\">{}</strong>",
                env.rs_url
            )),
            "{}",
            res.text
        );
        assert!(
            res.raw.contains("type=\"hidden\" name=\"resource_uri\""),
            "{}",
            res.raw
        );
        assert!(!res.raw.contains("type=\"url\""), "{}", res.raw);
    }
    // A start link's GET with a forged tag starts nothing either.
    let forged = format!("{link}&started=AAAA");
    let res = b.get(&forged).await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(!res.text.contains("UA23"), "{}", res.text);
    // The POST of the filled-in form starts it.
    let res = b.post(&link, &[("resource_uri", &pack.resource_uri)]).await;
    assert_eq!(res.status, 303, "{}", res.text);
    assert!(res.location().starts_with("/c/"), "{}", res.location());

    let other = format!(
        "{START}?resource_uri={}",
        url::form_urlencoded::byte_serialize(b"http://127.0.0.1:9/cheq/x").collect::<String>()
    );
    let res = b.get(&other).await;
    assert_eq!(res.status, 400, "{}", res.text);
    env.stop().await;
}

/// §2: the sign-in that follows a user's own POST goes on to the page; the
/// tag that carries the POST holds only in the browser that posted, so a
/// login link copied to another browser (or made up) starts nothing there.
#[actix_web::test]
async fn only_the_browser_that_posted_goes_on_to_the_page() {
    let env = Env::start(Options::default()).await;
    let pack = env.invoke().await;
    let mut a = env.browser();
    let res = a
        .post(START, &[("resource_uri", pack.resource_uri.as_str())])
        .await;
    assert_eq!(res.status, 303, "{}", res.text);
    let to_login = res.location();
    assert!(
        to_login.starts_with("/login?next=") && to_login.contains("started"),
        "{to_login}"
    );

    // Another browser signs in through the same link: the start page, with
    // its one button, and no confirmation started.
    let mut b = env.browser();
    let res = b.login_at(&to_login, "alice", ALICE_PW).await;
    assert_eq!(res.status, 303, "{}", res.text);
    let next = res.location();
    assert!(!next.starts_with("/c/"), "{next}");
    let page = b.get(&next).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(!page.text.contains("UA23"), "{}", page.text);
    assert!(page.text.contains("Continue"), "{}", page.text);

    // The browser that posted goes on to the page.
    let res = a.login_at(&to_login, "alice", ALICE_PW).await;
    assert_eq!(res.status, 303, "{}", res.text);
    let path = res.location();
    assert!(path.starts_with("/c/"), "{path}");
    let page = a.get(&path).await;
    assert!(page.text.contains("UA23"), "{}", page.text);
    env.stop().await;
}
