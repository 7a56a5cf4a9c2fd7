//! The voice view (PROTOCOL.md §10 `voice`, CHEQ draft §7): plain text and
//! SSML 1.1 that read out every fact the HTML page shows — who asks, the
//! operation, every parameter's name, description and value, the expiry —
//! then any warning, then the question. Nothing is dropped or summarised.
//!
//! Values are made speakable: money reads as money ("1,200 US dollars"),
//! codes (flight and account numbers) are spelled character by character,
//! dates read as dates. The plain text is what `cheq_view` hashes for a voice
//! decision.

use super::view::{CheqView, InputView};
use super::warnings::Warning;
use chrono::{DateTime, NaiveDate, Utc};

/// How a value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spoken {
    /// Read as it is.
    Plain(String),
    /// Spelled character by character.
    Characters(String),
    /// A calendar date.
    Date(NaiveDate),
    /// A date and time (UTC).
    DateTime(DateTime<Utc>),
    /// An amount of money: (whole units with grouping, cents, currency code).
    Money { amount: String, currency: String },
}

fn currency_words(code: &str) -> &str {
    match code {
        "USD" => "US dollars",
        "EUR" => "euros",
        "GBP" => "pounds sterling",
        "JPY" => "yen",
        "CHF" => "Swiss francs",
        "CAD" => "Canadian dollars",
        other => other,
    }
}

fn group(whole: &str) -> String {
    let digits: Vec<char> = whole.chars().collect();
    let mut out = String::new();
    for (i, c) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(*c);
    }
    out
}

fn is_number(s: &str) -> bool {
    let (w, f) = s.split_once('.').unwrap_or((s, ""));
    !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()) && f.chars().all(|c| c.is_ascii_digit())
}

fn money(number: &str, currency: &str) -> Spoken {
    let (w, f) = number.split_once('.').unwrap_or((number, ""));
    let amount = match f.trim_end_matches('0') {
        "" => group(w),
        _ => format!("{}.{:0<2}", group(w), f),
    };
    Spoken::Money {
        amount,
        currency: currency.to_owned(),
    }
}

/// Decides how to read `value`, given its parameter's name and description.
pub fn classify(name: &str, description: Option<&str>, value: &str) -> Spoken {
    let v = value.trim();
    let context = format!("{} {}", name, description.unwrap_or("")).to_lowercase();
    // "1200 USD", "USD 1200"
    let parts: Vec<&str> = v.split_whitespace().collect();
    if let [a, b] = parts.as_slice() {
        let (num, cur) = if is_number(a) { (*a, *b) } else { (*b, *a) };
        if is_number(num) && cur.len() == 3 && cur.chars().all(|c| c.is_ascii_uppercase()) {
            return money(num, cur);
        }
    }
    if is_number(v) {
        let is_money = ["usd", "dollar", "price", "amount", "cost", "fare"]
            .iter()
            .any(|w| context.contains(w));
        if is_money {
            let cur = if context.contains("eur") {
                "EUR"
            } else {
                "USD"
            };
            return money(v, cur);
        }
        if v.len() >= 5 && !v.contains('.') {
            // Account numbers and other long digit strings.
            return Spoken::Characters(v.to_owned());
        }
        return Spoken::Plain(v.to_owned());
    }
    if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        return Spoken::Date(d);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Spoken::DateTime(t.with_timezone(&Utc));
    }
    let code_like = !v.is_empty()
        && v.len() <= 24
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && v.chars().any(|c| c.is_ascii_digit())
        && v.chars().any(|c| c.is_ascii_alphabetic());
    if code_like {
        return Spoken::Characters(v.to_owned());
    }
    if !v.is_empty() && v.len() <= 32 && v.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
        // Enumerations such as PREMIUM_ECONOMY read as words.
        return Spoken::Plain(v.replace('_', " ").to_lowercase());
    }
    Spoken::Plain(v.to_owned())
}

fn spell(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '-' => "dash".to_owned(),
            c => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The plain-text reading of a value.
pub fn say(s: &Spoken) -> String {
    match s {
        Spoken::Plain(t) => t.clone(),
        Spoken::Characters(t) => spell(t),
        Spoken::Date(d) => d.format("%B %-d, %Y").to_string(),
        Spoken::DateTime(t) => t.format("%B %-d, %Y at %H:%M UTC").to_string(),
        Spoken::Money { amount, currency } => format!("{amount} {}", currency_words(currency)),
    }
}

/// XML-escapes text for SSML.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Not allowed in XML 1.0 at all.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The SSML reading of a value.
fn ssml(s: &Spoken) -> String {
    match s {
        Spoken::Plain(t) => xml_escape(t),
        Spoken::Characters(t) => format!(
            "<say-as interpret-as=\"characters\">{}</say-as>",
            xml_escape(t)
        ),
        Spoken::Date(d) => format!(
            "<say-as interpret-as=\"date\" format=\"ymd\">{}</say-as>",
            d.format("%Y-%m-%d")
        ),
        Spoken::DateTime(t) => format!(
            "<say-as interpret-as=\"date\" format=\"ymd\">{}</say-as> at <say-as interpret-as=\"time\" format=\"hms24\">{}</say-as> UTC",
            t.format("%Y-%m-%d"),
            t.format("%H:%M")
        ),
        Spoken::Money { amount, currency } => format!(
            "<say-as interpret-as=\"currency\">{} {}</say-as>",
            xml_escape(amount),
            xml_escape(currency_words(currency))
        ),
    }
}

/// One sentence of the reading, in both forms.
struct Line {
    text: String,
    ssml: String,
}

fn plain(t: String) -> Line {
    Line {
        ssml: xml_escape(&t),
        text: t,
    }
}

/// The spoken prompt for a value the user must supply (§8).
pub fn input_prompt(name: &str, description: Option<&str>, input: &InputView) -> String {
    let what = match description {
        Some(d) => format!("{name} ({d})"),
        None => name.to_owned(),
    };
    let how = match input.kind {
        "digits" => "Say or key in the digits, then press the hash key.",
        "amount" => "Say the amount, for example two hundred and fifty point zero zero.",
        _ => "Say the value.",
    };
    let privacy = if input.sensitive {
        " It goes only to the resource server, not to the AI agent."
    } else {
        ""
    };
    format!("Please give the {what}. {how}{privacy}")
}

/// The voice view of a CHEQ: (plain text, SSML).
pub fn voice_view(v: &CheqView, warnings: &[Warning], cs_origin: &str) -> (String, String) {
    let mut lines = vec![
        plain(format!(
            "This is the confirmation service at {cs_origin}, not the AI agent."
        )),
        plain(format!(
            "{} asks you to confirm this request: {}.",
            v.resource_origin, v.operation_name
        )),
        plain(format!("The operation is {}.", v.operation)),
    ];
    for p in &v.parameters {
        let mut head = p.name.clone();
        if let Some(d) = &p.description {
            head.push_str(&format!(", {d}"));
        }
        match (&p.value, &p.input) {
            (Some(value), _) => {
                let s = classify(&p.name, p.description.as_deref(), value);
                lines.push(Line {
                    text: format!("{head}: {}.", say(&s)),
                    ssml: format!("{}: {}.", xml_escape(&head), ssml(&s)),
                });
            }
            (None, Some(i)) => {
                let how = match i.kind {
                    "digits" => "Say or key in the digits",
                    "amount" => "Say the amount",
                    _ => "Say the value",
                };
                lines.push(plain(format!(
                    "{head}: you will be asked for this{}. {how} when prompted.",
                    if i.required { "" } else { ", optionally" }
                )));
            }
            (None, None) => lines.push(plain(format!("{head}: no value."))),
        }
    }
    let expires = DateTime::parse_from_rfc3339(&v.expires)
        .map(|t| Spoken::DateTime(t.with_timezone(&Utc)))
        .unwrap_or_else(|_| Spoken::Plain(v.expires.clone()));
    lines.push(Line {
        text: format!(
            "This request is for {}. It expires on {}.",
            v.subject,
            say(&expires)
        ),
        ssml: format!(
            "This request is for {}. It expires on {}.",
            xml_escape(&v.subject),
            ssml(&expires)
        ),
    });
    for w in warnings {
        lines.push(plain(format!(
            "Warning: the {} {}.",
            if w.parameter == "operation name" {
                "operation name".to_owned()
            } else {
                format!("parameter {}", w.parameter)
            },
            w.detail
        )));
    }
    lines.push(plain(
        "Do you accept this request? Answer yes or no.".to_owned(),
    ));
    let text = lines
        .iter()
        .map(|l| l.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let body = lines
        .iter()
        .map(|l| format!("<s>{}</s>", l.ssml))
        .collect::<Vec<_>>()
        .join("\n");
    let ssml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<speak version=\"1.1\" xmlns=\"http://www.w3.org/2001/10/synthesis\" xml:lang=\"{}\">\n<p>\n{body}\n</p>\n</speak>\n",
        xml_escape(&v.language)
    );
    (text + "\n", ssml)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_made_speakable() {
        assert_eq!(
            say(&classify("price", Some("in US dollars"), "1200")),
            "1,200 US dollars"
        );
        assert_eq!(
            say(&classify("total", None, "1200 USD")),
            "1,200 US dollars"
        );
        assert_eq!(say(&classify("amount", None, "250.5")), "250.50 US dollars");
        assert_eq!(say(&classify("flight number", None, "UA23")), "U A 2 3");
        assert_eq!(
            say(&classify("to account", None, "87654321")),
            "8 7 6 5 4 3 2 1"
        );
        assert_eq!(
            say(&classify("flight date", None, "2026-12-08")),
            "December 8, 2026"
        );
        assert_eq!(
            say(&classify("cabin class", None, "PREMIUM_ECONOMY")),
            "premium economy"
        );
        assert_eq!(say(&classify("seats", None, "2")), "2");
        assert_eq!(say(&classify("memo", None, "rent for May")), "rent for May");
    }

    #[test]
    fn xml_is_escaped() {
        assert_eq!(
            xml_escape("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot; "
        );
    }
}
