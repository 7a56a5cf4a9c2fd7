//! What the load generators do: mint CHEQs as the agent, and as a browser
//! read hidden form fields and the session cookie, sign alice in and confirm.

// Each benchmark uses a part of this module.
#![allow(dead_code)]

use reqwest::header;
use serde_json::Value;
use std::sync::Arc;

/// Asks the RS for `n` confirmations as the demo's agent (64 at a time);
/// returns their resource URIs.
pub async fn mint(http: &reqwest::Client, rs: &str, n: usize) -> Vec<String> {
    let token: Value = http
        .post(format!("{rs}/oauth/token"))
        .basic_auth("demo-agent", Some("demo-agent-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .expect("agent token")
        .json()
        .await
        .expect("agent token body");
    let token = Arc::new(
        token["access_token"]
            .as_str()
            .expect("access_token")
            .to_owned(),
    );
    let body = Arc::new(
        serde_json::json!({"name": "book_flight", "input_parameters": [
        {"name": "flight_number", "value": "UA23"},
        {"name": "flight_date", "value": "2026-12-08"},
        {"name": "cabin_class", "value": "BUSINESS"},
        {"name": "price_usd", "value": 1200}]}),
    );
    let mut uris = Vec::with_capacity(n);
    let mut pending = Vec::new();
    for _ in 0..n {
        let (http, rs, token, body) = (http.clone(), rs.to_owned(), token.clone(), body.clone());
        pending.push(tokio::spawn(async move {
            let res = http
                .post(format!("{rs}/tools/book_flight:invoke"))
                .bearer_auth(token.as_str())
                .json(body.as_ref())
                .send()
                .await
                .ok()?;
            let pack: Value = res.json().await.ok()?;
            pack["resource uri"].as_str().map(str::to_owned)
        }));
        if pending.len() >= 64 {
            for p in pending.drain(..) {
                uris.extend(p.await.ok().flatten());
            }
        }
    }
    for p in pending.drain(..) {
        uris.extend(p.await.ok().flatten());
    }
    uris
}

/// Opens the confirmation page of `resource_uri` (`POST /` then `GET /c/{id}`);
/// returns the page's path and HTML.
pub async fn open(
    http: &reqwest::Client,
    cs: &str,
    session: &str,
    resource_uri: &str,
) -> Result<(String, String), String> {
    let res = http
        .post(format!("{cs}/"))
        .header(header::COOKIE, session)
        .form(&[("resource_uri", resource_uri)])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let page = res
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .filter(|l| l.starts_with("/c/"))
        .ok_or("start did not lead to a page")?
        .to_owned();
    let res = http
        .get(format!("{cs}{page}"))
        .header(header::COOKIE, session)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if res.status() != 200 {
        return Err(format!("page: HTTP {}", res.status()));
    }
    let html = res.text().await.map_err(|e| e.to_string())?;
    Ok((page, html))
}

/// The value of the hidden field `name` of a page.
pub fn hidden(page: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page.find(&marker)? + marker.len();
    let end = page[start..].find('"')?;
    Some(page[start..start + end].to_owned())
}

/// The session cookie a response sets (`name=value`).
pub fn cookie(res: &reqwest::Response) -> Option<String> {
    res.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("cheq_session="))
        .and_then(|v| v.split(';').next())
        .map(str::to_owned)
}

/// Signs alice in with `password`; returns the session cookie.
pub async fn login(http: &reqwest::Client, cs: &str, password: &str) -> String {
    let res = http
        .get(format!("{cs}/login"))
        .send()
        .await
        .expect("login form");
    let pre = cookie(&res).expect("pre-login cookie");
    let page = res.text().await.expect("login page");
    let csrf = hidden(&page, "csrf").expect("csrf");
    let res = http
        .post(format!("{cs}/login"))
        .header(header::COOKIE, &pre)
        .form(&[
            ("username", "alice"),
            ("password", password),
            ("csrf", &csrf),
            ("next", "/history"),
        ])
        .send()
        .await
        .expect("login");
    assert_eq!(res.status(), 303, "login failed");
    cookie(&res).expect("session cookie")
}

/// One complete flow as a browser: open the page, accept; Ok only if the
/// outcome page says the decision was delivered.
pub async fn flow(
    http: &reqwest::Client,
    cs: &str,
    session: &str,
    resource_uri: &str,
) -> Result<(), String> {
    let (page, html) = open(http, cs, session, resource_uri).await?;
    let csrf = hidden(&html, "csrf").ok_or("no csrf")?;
    let view = hidden(&html, "view").ok_or("no view")?;
    let res = http
        .post(format!("{cs}{page}"))
        .header(header::COOKIE, session)
        .form(&[
            ("csrf", csrf.as_str()),
            ("view", view.as_str()),
            ("decision", "accept"),
        ])
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let outcome = res.text().await.map_err(|e| e.to_string())?;
    if outcome.contains("class=\"delivery\">delivered<") {
        Ok(())
    } else {
        Err("the decision was not delivered".into())
    }
}

/// The resident memory (`VmRSS`, KiB) of process `pid` (or `self`); 0 when
/// it cannot be read.
pub fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system, seconds) that process `pid` (or `self`) has used
/// so far, from `/proc/{pid}/stat`; `None` when it cannot be read.
pub fn cpu_secs(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: the fields start after its ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (1-based).
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // The kernel counts in USER_HZ, 100 on Linux.
    Some(ticks / 100.0)
}
