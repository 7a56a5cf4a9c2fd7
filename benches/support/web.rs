//! What the load generators read from the CS's pages: hidden form fields and
//! the session cookie.

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
