//! Deceptive-text warnings (PROTOCOL.md §10 `warnings`): text in a CHEQ that
//! can show one thing and mean another. Four kinds, after Unicode TS #39 (the
//! `unicode-security` crate supplies the tables):
//!
//! - `bidi_control`: U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C,
//!   which reorder what a reader sees;
//! - `invisible`: default-ignorable code points (zero-width spaces and joiners,
//!   soft hyphens, fillers…), which a reader cannot see at all;
//! - `mixed_script`: one word mixing scripts (a Cyrillic `а` in a Latin word);
//! - `confusable`: a non-ASCII word whose TS #39 skeleton is plain ASCII (it
//!   passes for an ASCII word it is not).
//!
//! [`visible`] turns bidi and invisible characters into `⟨U+XXXX⟩`, so that
//! pages and voice text show them instead of obeying them.

use unicode_security::{skeleton, MixedScript};

/// One warning, about one piece of text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// The parameter name, or `operation name` for the operation.
    pub parameter: String,
    /// `bidi_control`, `invisible`, `mixed_script` or `confusable`.
    pub kind: &'static str,
    /// What was found, in words (hidden characters made visible).
    pub detail: String,
}

/// Is `c` a bidirectional control character?
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Is `c` invisible (a default-ignorable code point, or another format or
/// control character a reader cannot see)?
pub fn is_invisible(c: char) -> bool {
    if c.is_ascii() {
        // Printable ASCII is never hidden; of ASCII controls, only a line
        // break is harmless.
        return c.is_ascii_control() && c != '\n';
    }
    if is_bidi_control(c) {
        return false;
    }
    let mut buf = [0u8; 4];
    // The TS #39 skeleton drops exactly the default-ignorable code points.
    skeleton(c.encode_utf8(&mut buf)).next().is_none() || (c.is_control() && c != '\n')
}

/// `text` with every bidi control and invisible character shown as `⟨U+XXXX⟩`.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_bidi_control(c) || is_invisible(c) {
            out.push_str(&format!("⟨U+{:04X}⟩", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

fn codes(chars: impl Iterator<Item = char>) -> String {
    let mut seen: Vec<char> = Vec::new();
    for c in chars {
        if !seen.contains(&c) {
            seen.push(c);
        }
    }
    seen.iter()
        .map(|c| format!("U+{:04X}", *c as u32))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The warnings for one piece of text, reported under `parameter`.
pub fn check(parameter: &str, text: &str) -> Vec<Warning> {
    let mut out = Vec::new();
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        // Printable ASCII: nothing hidden, one script, nothing confusable.
        return out;
    }
    let shown = visible(parameter);
    let bidi: Vec<char> = text.chars().filter(|c| is_bidi_control(*c)).collect();
    if !bidi.is_empty() {
        out.push(Warning {
            parameter: shown.clone(),
            kind: "bidi_control",
            detail: format!(
                "contains characters that reverse or reorder the text: {}",
                codes(bidi.into_iter())
            ),
        });
    }
    let hidden: Vec<char> = text.chars().filter(|c| is_invisible(*c)).collect();
    if !hidden.is_empty() {
        out.push(Warning {
            parameter: shown.clone(),
            kind: "invisible",
            detail: format!(
                "contains invisible characters: {}",
                codes(hidden.into_iter())
            ),
        });
    }
    let words = text
        .split(|c: char| c.is_whitespace() || is_bidi_control(c) || is_invisible(c))
        .map(|w| w.trim_matches(|c: char| c.is_ascii_punctuation()))
        .filter(|w| !w.is_empty());
    let mut mixed = Vec::new();
    let mut confusable = Vec::new();
    for word in words {
        if word.is_ascii() {
            // One script, and nothing to be confused with ASCII.
            continue;
        }
        if !word.is_single_script() {
            mixed.push(word.to_owned());
        }
        if !word.is_ascii() {
            let skel: String = skeleton(word).collect();
            if skel.is_ascii() && skel != word && !skel.is_empty() {
                confusable.push((word.to_owned(), skel));
            }
        }
    }
    if !mixed.is_empty() {
        out.push(Warning {
            parameter: shown.clone(),
            kind: "mixed_script",
            detail: format!(
                "mixes writing systems within a word: {}",
                mixed
                    .iter()
                    .map(|w| format!("\"{w}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    if !confusable.is_empty() {
        out.push(Warning {
            parameter: shown,
            kind: "confusable",
            detail: format!(
                "looks like plain text it is not: {}",
                confusable
                    .iter()
                    .map(|(w, s)| format!("\"{w}\" looks like \"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<&'static str> {
        check("payee", text).into_iter().map(|w| w.kind).collect()
    }

    #[test]
    fn plain_text_has_no_warnings() {
        for t in [
            "Acme Corp",
            "UA23",
            "2026-12-08",
            "1,200.00 USD",
            "Ωμέγα",
            "Zürich",
            "東京",
        ] {
            assert!(kinds(t).is_empty(), "{t}: {:?}", check("p", t));
        }
    }

    #[test]
    fn bidi_controls_are_found_and_shown() {
        let t = "Acme \u{202E}gnp.exe";
        assert_eq!(kinds(t), ["bidi_control"]);
        assert!(check("payee", t)[0].detail.contains("U+202E"));
        assert_eq!(visible(t), "Acme ⟨U+202E⟩gnp.exe");
        for c in [
            '\u{202A}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            assert_eq!(kinds(&format!("a{c}b")), ["bidi_control"], "{c:?}");
        }
    }

    #[test]
    fn invisible_characters_are_found() {
        for c in ['\u{200B}', '\u{200D}', '\u{2060}', '\u{FEFF}', '\u{00AD}'] {
            let t = format!("12{c}34");
            assert!(kinds(&t).contains(&"invisible"), "{c:?}");
            assert!(visible(&t).contains("⟨U+"), "{c:?}");
        }
    }

    #[test]
    fn mixed_scripts_and_confusables_are_found() {
        // A Cyrillic 'а' (U+0430) in a Latin word.
        let k = kinds("Amаzon Ltd");
        assert!(k.contains(&"mixed_script"), "{k:?}");
        assert!(k.contains(&"confusable"), "{k:?}");
        // All-Cyrillic, but confusable with the ASCII word "paypal".
        assert!(kinds("раураl").contains(&"confusable"));
        assert!(kinds("рау").contains(&"confusable"));
    }
}
