//! What the load generators do with the CS's pages: read hidden form fields
//! and the session cookie, and sign alice in.

use reqwest::header;

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
