//! Denial of service and lock-out at the confirmation server (PROTOCOL.md §2,
//! §10): a stranger's wrong guesses never make the right credential fail, and
//! nothing an unauthenticated caller sends makes the CS hash without bound.
//!
//! The clients here connect from different loopback addresses (127.0.0.2,
//! 127.0.0.3, …), so the CS sees a stranger and the owner as two addresses.
//! Everything runs in one test, in order, because it counts the argon2 checks
//! the process makes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use cheq::confirm::auth::checks_made;
use common::*;

const GW: &str = "voice-gw";
const GW_SECRET: &str = "gateway-secret-0123456789";

#[actix_web::test]
async fn strangers_neither_lock_out_nor_flood_the_hashing() {
    let env = Env::start(Options {
        gateways: vec![Gateway::new(GW, GW_SECRET)],
        ..Default::default()
    })
    .await;

    // 1. Six wrong passwords for alice from a stranger's address: that
    //    address is refused from then on, alice from hers is not.
    let mut stranger = env.browser();
    stranger.http = http_client_from("127.0.0.2");
    let mut refused = false;
    for i in 0..8 {
        let form = stranger.get("/login").await;
        let csrf = form.hidden("csrf").unwrap();
        let res = stranger
            .post(
                "/login",
                &[
                    ("csrf", &csrf),
                    ("username", "alice"),
                    ("password", &format!("wrong guess {i}")),
                ],
            )
            .await;
        if res.status == 429 {
            refused = true;
            assert!(res.header("retry-after").is_some());
            break;
        }
        assert_eq!(res.status, 401, "guess {i}: {}", res.text);
    }
    assert!(refused, "the stranger's address is never held back");
    let mut alice = env.browser();
    alice.sign_in("alice", ALICE_PW).await;
    let history = alice.get("/history").await;
    assert_eq!(history.status, 200, "alice is signed in: {}", history.text);

    // 2. Unknown gateway ids cost no hashing at all, and count against the
    //    address that sends them.
    let mut flooder = env.voice(&Gateway::new("no-such-gateway", "whatever-secret-1"));
    flooder.http = http_client_from("127.0.0.3");
    let before = checks_made();
    let mut statuses = Vec::new();
    for _ in 0..25 {
        let a = flooder.token("alice", "000000").await;
        statuses.push(a.status);
    }
    assert_eq!(checks_made(), before, "an unknown gateway id was hashed");
    assert!(statuses[..20].iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");

    // 3. A flood of bad secrets for the real gateway id from one address:
    //    a handful are checked, the rest refused before any hashing; the
    //    real gateway from its own address is still served.
    let mut guesser = env.voice(&Gateway::new(GW, "not-the-gateway-secret"));
    guesser.http = http_client_from("127.0.0.4");
    let guesser = std::sync::Arc::new(guesser);
    let before = checks_made();
    let tasks: Vec<_> = (0..300)
        .map(|_| {
            let g = guesser.clone();
            actix_web::rt::spawn(async move { g.token("alice", "000000").await.status })
        })
        .collect();
    let mut by_status = std::collections::BTreeMap::new();
    for t in tasks {
        *by_status.entry(t.await.unwrap()).or_insert(0) += 1;
    }
    let hashed = checks_made() - before;
    assert!(
        hashed <= 25,
        "{hashed} argon2 checks for 300 bad secrets from one address ({by_status:?})"
    );
    assert!(
        by_status.get(&429).copied().unwrap_or(0) >= 270,
        "{by_status:?}"
    );
    assert!(
        by_status.keys().all(|s| [401, 429, 503].contains(s)),
        "{by_status:?}"
    );
    env.set_pin("alice", "246810");
    let gateway = env.voice(&Gateway::new(GW, GW_SECRET));
    gateway.user_token("alice", "246810").await;

    env.stop().await;
}
