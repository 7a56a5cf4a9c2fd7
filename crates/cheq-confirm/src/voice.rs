//! The voice view (PROTOCOL.md §10 `voice`, CHEQ draft §7): plain text and
//! SSML 1.1 that read out every fact the HTML page shows — who asks, the
//! operation, every parameter's name, description, value and unit, the
//! expiry — then any warning, then the question. Nothing is dropped or
//! summarised.
//!
//! A view states only what the CHEQ says (§4). A value is read exactly as
//! written, or in a speakable form that names the same value exactly: codes
//! (flight and account numbers, long or zero-led digit strings) are spelled
//! character by character, dates read as dates, a number that has a unit has
//! its whole digits grouped ("120,000") and its fraction kept digit for digit.
//! A currency or unit comes only from `parameter unit` (a known ISO 4217 code
//! reads as the currency's name, anything else as written); it is never
//! guessed from a parameter's name or description, nor from the value. The
//! plain text is what `cheq_view` hashes for a voice decision.

use super::view::{CheqView, InputView};
use super::warnings::Warning;
use chrono::{DateTime, FixedOffset, NaiveDate, Timelike};

/// How a value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spoken {
    /// Read as it is.
    Plain(String),
    /// Spelled character by character.
    Characters(String),
    /// A decimal number written with thousands separators ("120,000",
    /// "1,234.50"): the same digits, in the same order.
    Number(String),
    /// A calendar date.
    Date(NaiveDate),
    /// A date and time, in the offset it was written with.
    DateTime(DateTime<FixedOffset>),
    /// A value and its unit, the unit taken from `parameter unit` only.
    Measured { value: Box<Spoken>, unit: Unit },
}

/// A parameter's unit (§4 `parameter unit`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// An ISO 4217 code whose currency this reader knows by name.
    Currency(&'static str),
    /// Anything else, read as written: a unit word, or a code it does not know.
    AsWritten(String),
}

impl Unit {
    /// The unit of `parameter unit`, or none when it is absent or blank.
    pub fn of(unit: Option<&str>) -> Option<Unit> {
        let u = unit?.trim();
        if u.is_empty() {
            return None;
        }
        Some(match currency_name(u) {
            Some(name) => Unit::Currency(name),
            None => Unit::AsWritten(u.to_owned()),
        })
    }

    /// How the unit is said.
    pub fn words(&self) -> &str {
        match self {
            Unit::Currency(name) => name,
            Unit::AsWritten(u) => u,
        }
    }
}

/// The English name of an ISO 4217 currency this reader knows; an exact,
/// upper-case code only.
fn currency_name(code: &str) -> Option<&'static str> {
    Some(match code {
        "USD" => "US dollars",
        "EUR" => "euros",
        "GBP" => "pounds sterling",
        "JPY" => "Japanese yen",
        "CHF" => "Swiss francs",
        "CAD" => "Canadian dollars",
        "AUD" => "Australian dollars",
        "NZD" => "New Zealand dollars",
        "CNY" => "Chinese yuan",
        "HKD" => "Hong Kong dollars",
        "SGD" => "Singapore dollars",
        "INR" => "Indian rupees",
        "KRW" => "South Korean won",
        "SEK" => "Swedish kronor",
        "NOK" => "Norwegian kroner",
        "DKK" => "Danish kroner",
        "PLN" => "Polish zloty",
        "CZK" => "Czech koruny",
        "MXN" => "Mexican pesos",
        "BRL" => "Brazilian reais",
        "ZAR" => "South African rand",
        _ => return None,
    })
}

/// `1234567` → `1,234,567`: the same digits, in the same order.
fn group(whole: &str) -> String {
    let digits: Vec<char> = whole.chars().collect();
    let mut out = String::new();
    for (i, c) in digits.iter().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(*c);
    }
    out
}

/// A plain decimal: ASCII digits, optionally a point and more digits.
fn is_decimal(s: &str) -> bool {
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    match s.split_once('.') {
        Some((w, f)) => digits(w) && digits(f),
        None => digits(s),
    }
}

/// Decides how to read `value`, whose unit is `parameter unit` (if any). The
/// parameter's name and description are deliberately not inputs: nothing is
/// guessed from them (§4).
pub fn classify(value: &str, unit: Option<&str>) -> Spoken {
    let bare = classify_value(value, unit.is_some_and(|u| !u.trim().is_empty()));
    match Unit::of(unit) {
        Some(unit) => Spoken::Measured {
            value: Box::new(bare),
            unit,
        },
        None => bare,
    }
}

fn classify_value(value: &str, has_unit: bool) -> Spoken {
    let v = value.trim();
    if is_decimal(v) {
        let (whole, fraction) = v.split_once('.').unwrap_or((v, ""));
        if whole.len() > 1 && whole.starts_with('0') {
            // "0042": a leading zero is part of the value; say every digit.
            return Spoken::Characters(v.to_owned());
        }
        if has_unit {
            return Spoken::Number(if fraction.is_empty() {
                group(whole)
            } else {
                format!("{}.{fraction}", group(whole))
            });
        }
        if v.len() >= 5 && fraction.is_empty() {
            // Account numbers and other long digit strings.
            return Spoken::Characters(v.to_owned());
        }
        return Spoken::Plain(v.to_owned());
    }
    if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        return Spoken::Date(d);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Spoken::DateTime(t);
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
            '.' => "point".to_owned(),
            c => c.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The time of day, to the precision it was written with: never rounded.
fn time_of_day(t: &DateTime<FixedOffset>) -> String {
    if t.nanosecond() != 0 {
        t.format("%H:%M:%S%.f").to_string()
    } else if t.second() != 0 {
        t.format("%H:%M:%S").to_string()
    } else {
        t.format("%H:%M").to_string()
    }
}

/// The offset, as written: `UTC` or `UTC+09:00`.
fn offset_words(t: &DateTime<FixedOffset>) -> String {
    if t.offset().local_minus_utc() == 0 {
        "UTC".to_owned()
    } else {
        format!("UTC{}", t.format("%:z"))
    }
}

/// The plain-text reading of a value.
pub fn say(s: &Spoken) -> String {
    match s {
        Spoken::Plain(t) | Spoken::Number(t) => t.clone(),
        Spoken::Characters(t) => spell(t),
        Spoken::Date(d) => d.format("%B %-d, %Y").to_string(),
        Spoken::DateTime(t) => format!(
            "{} at {} {}",
            t.format("%B %-d, %Y"),
            time_of_day(t),
            offset_words(t)
        ),
        Spoken::Measured { value, unit } => format!("{} {}", say(value), unit.words()),
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

/// The SSML reading of a value. Money is not marked `interpret-as="currency"`:
/// a synthesiser may round what it reads as currency; plain words cannot be.
fn ssml(s: &Spoken) -> String {
    match s {
        Spoken::Plain(t) | Spoken::Number(t) => xml_escape(t),
        Spoken::Characters(t) => format!(
            "<say-as interpret-as=\"characters\">{}</say-as>",
            xml_escape(t)
        ),
        Spoken::Date(d) => format!(
            "<say-as interpret-as=\"date\" format=\"ymd\">{}</say-as>",
            d.format("%Y-%m-%d")
        ),
        Spoken::DateTime(t) => format!(
            "<say-as interpret-as=\"date\" format=\"ymd\">{}</say-as> at <say-as interpret-as=\"time\" format=\"hms24\">{}</say-as> {}",
            t.format("%Y-%m-%d"),
            time_of_day(t),
            offset_words(t)
        ),
        Spoken::Measured { value, unit } => {
            format!("{} {}", ssml(value), xml_escape(unit.words()))
        }
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
                let s = classify(value, p.unit.as_deref());
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
                let unit = match Unit::of(p.unit.as_deref()) {
                    Some(u) => format!("; the unit is {}", u.words()),
                    None => String::new(),
                };
                lines.push(plain(format!(
                    "{head}: you will be asked for this{}{unit}. {how} when prompted.",
                    if i.required { "" } else { ", optionally" }
                )));
            }
            (None, None) => lines.push(plain(format!("{head}: no value."))),
        }
    }
    let expires = DateTime::parse_from_rfc3339(&v.expires)
        .map(Spoken::DateTime)
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
        assert_eq!(say(&classify("1200", Some("USD"))), "1,200 US dollars");
        assert_eq!(say(&classify("UA23", None)), "U A 2 3");
        assert_eq!(say(&classify("87654321", None)), "8 7 6 5 4 3 2 1");
        assert_eq!(say(&classify("2026-12-08", None)), "December 8, 2026");
        assert_eq!(say(&classify("PREMIUM_ECONOMY", None)), "premium economy");
        assert_eq!(say(&classify("2", None)), "2");
        assert_eq!(say(&classify("rent for May", None)), "rent for May");
    }

    #[test]
    fn a_currency_or_unit_comes_only_from_parameter_unit() {
        // No unit: a bare number, whatever the value seems to say.
        assert_eq!(say(&classify("120000", None)), "1 2 0 0 0 0");
        assert_eq!(say(&classify("45", None)), "45");
        assert_eq!(say(&classify("1200 USD", None)), "1200 USD");
        assert_eq!(say(&classify("USD 1200", None)), "USD 1200");
        assert_eq!(say(&classify("250.5", None)), "250.5");
        // A known ISO 4217 code reads as the currency's name.
        assert_eq!(
            say(&classify("120000", Some("JPY"))),
            "120,000 Japanese yen"
        );
        assert_eq!(say(&classify("45", Some("EUR"))), "45 euros");
        // An unknown code, and a unit word, read as written.
        assert_eq!(say(&classify("12", Some("XAU"))), "12 XAU");
        assert_eq!(say(&classify("12", Some("usd"))), "12 usd");
        assert_eq!(say(&classify("3", Some("nights"))), "3 nights");
        assert_eq!(say(&classify("20.5", Some("kg"))), "20.5 kg");
        // A blank unit is no unit.
        assert_eq!(say(&classify("120000", Some(" "))), "1 2 0 0 0 0");
        assert_eq!(classify("7", Some("")), Spoken::Plain("7".into()));
    }

    #[test]
    fn values_are_read_exactly() {
        // No rounding, no padding, no dropping of trailing zeros.
        assert_eq!(say(&classify("250.5", Some("USD"))), "250.5 US dollars");
        assert_eq!(say(&classify("250.00", Some("EUR"))), "250.00 euros");
        assert_eq!(say(&classify("250.00", None)), "250.00");
        assert_eq!(say(&classify("0.005", Some("USD"))), "0.005 US dollars");
        // A leading zero is part of the value: every digit is said.
        assert_eq!(say(&classify("0042", None)), "0 0 4 2");
        assert_eq!(say(&classify("0042", Some("kg"))), "0 0 4 2 kg");
        assert_eq!(
            say(&classify("007.50", Some("USD"))),
            "0 0 7 point 5 0 US dollars"
        );
        // A long account-like digit string is spelled, never grouped or shortened.
        assert_eq!(
            say(&classify("000123456789", None)),
            "0 0 0 1 2 3 4 5 6 7 8 9"
        );
        // Separators the value already has are not reinterpreted.
        assert_eq!(say(&classify("1.200", Some("EUR"))), "1.200 euros");
        assert_eq!(say(&classify("1,5", Some("EUR"))), "1,5 euros");
        assert_eq!(say(&classify("1.", Some("EUR"))), "1. euros");
        // Times keep their seconds and their offset.
        assert_eq!(
            say(&classify("2026-12-08T10:00:30+09:00", None)),
            "December 8, 2026 at 10:00:30 UTC+09:00"
        );
        assert_eq!(
            say(&classify("2026-12-08T10:00:00.250Z", None)),
            "December 8, 2026 at 10:00:00.250 UTC"
        );
        assert_eq!(
            say(&classify("2026-12-08T10:00:00Z", None)),
            "December 8, 2026 at 10:00 UTC"
        );
    }

    /// Grouping a number that has a unit keeps every digit in its place:
    /// taking the separators out gives the value back.
    #[test]
    fn grouping_names_the_same_number() {
        let mut values: Vec<String> = Vec::new();
        let mut x: u64 = 1;
        for _ in 0..19 {
            values.push(x.to_string());
            values.push((x * 7 + 3).to_string());
            values.push(format!("{x}.{:03}", x % 1000));
            values.push(format!("{}.10", x * 9));
            x = x.saturating_mul(10);
        }
        values.push("0".into());
        values.push("0.0".into());
        for v in values {
            for unit in ["USD", "JPY", "nights"] {
                let said = say(&classify(&v, Some(unit)));
                let words = Unit::of(Some(unit)).map(|u| u.words().to_owned());
                let number = said
                    .strip_suffix(&format!(" {}", words.unwrap_or_default()))
                    .unwrap_or_else(|| panic!("{said:?} has no unit"));
                assert_eq!(number.replace(',', ""), v, "{v} read as {said:?}");
                if v.len() > 3 && !v.contains('.') {
                    assert!(number.contains(','), "{v} grouped as {number}");
                }
            }
        }
    }

    #[test]
    fn xml_is_escaped() {
        assert_eq!(
            xml_escape("a<b & \"c\"\u{1}"),
            "a&lt;b &amp; &quot;c&quot; "
        );
    }
}
