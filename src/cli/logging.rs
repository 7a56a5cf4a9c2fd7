//! Log lines an operator can search across instances: the
//! `tracing` ecosystem (the crate's `log` records are bridged into it), as
//! readable text or, with `log_format = "json"`, one JSON object per line.
//!
//! Every line carries the instance it came from (`CHEQ_INSTANCE`, else the
//! host name and the listen address) and the spans it happened in: the HTTP
//! request (`request_id`, from `tracing-actix-web`) and, for everything about
//! one confirmation — its start, page, decision and every delivery attempt,
//! on whichever instance — `confirmation_id` (the base64url SHA-256 of its
//! resource URI, the same at the CS and at the RS).
//!
//! Whatever a peer or a user sent can neither forge a line nor flood the
//! log: each event is one line of bounded length ([`OneLine`]).

use crate::configfile::LogFormat;
use std::io::Write;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Longest log line, in bytes.
pub const MAX_LINE: usize = 8 * 1024;

/// The name of this instance in log lines.
pub fn instance_name(listen: &str) -> String {
    if let Ok(name) = std::env::var("CHEQ_INSTANCE") {
        if !name.is_empty() {
            return crate::text::one_line(&name);
        }
    }
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    crate::text::one_line(&format!("{host}/{listen}"))
}

/// Starts logging to standard error, at `info` unless `RUST_LOG` says
/// otherwise. A second call does nothing.
pub fn init(format: LogFormat, instance: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let writer = OneLine {
        instance: instance.to_owned(),
        json: format == LogFormat::Json,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// A writer of whole events that keeps each to one bounded line and adds
/// the instance (`"instance":…` first in a JSON object, `instance=…`
/// before a text line).
#[derive(Debug, Clone)]
pub struct OneLine {
    instance: String,
    json: bool,
}

impl OneLine {
    /// The line written for one formatted event (which ends with `\n`).
    pub fn line(&self, event: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(event);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        // Anything that would end the line early becomes visible instead.
        let mut body: String = body
            .chars()
            .map(|c| match c {
                '\n' | '\r' | '\u{2028}' | '\u{2029}' => '⏎',
                c if c.is_control() && c != '\t' => '\u{fffd}',
                c => c,
            })
            .collect();
        if body.len() > MAX_LINE {
            let mut cut = MAX_LINE;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
            // A cut JSON object is no longer JSON: say so as JSON.
            if self.json {
                body = serde_json::json!({"cut": body}).to_string();
            } else {
                body.push_str(" …(cut)");
            }
        }
        let line = if self.json {
            let instance = serde_json::Value::String(self.instance.clone()).to_string();
            match body.strip_prefix('{') {
                Some(rest) if rest.trim_start().starts_with('}') => {
                    format!("{{\"instance\":{instance}}}")
                }
                Some(rest) => format!("{{\"instance\":{instance},{rest}"),
                None => body,
            }
        } else {
            format!("instance={} {body}", self.instance)
        };
        let mut out = line.into_bytes();
        out.push(b'\n');
        out
    }
}

/// One event's bytes, written as one line when dropped (tracing-subscriber
/// formats an event whole, then writes it).
pub struct EventWriter {
    config: OneLine,
    buf: Vec<u8>,
}

impl Write for EventWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = self.config.line(&self.buf);
        let _ = std::io::stderr().lock().write_all(&line);
    }
}

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = EventWriter;

    fn make_writer(&'a self) -> Self::Writer {
        EventWriter {
            config: self.clone(),
            buf: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_bounded_line_that_names_the_instance() {
        let text = OneLine {
            instance: "h/127.0.0.1:8080".into(),
            json: false,
        };
        let line = String::from_utf8(text.line(b"INFO a\nforged INFO line\r\x1b[31m\n")).unwrap();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(
            line.starts_with("instance=h/127.0.0.1:8080 INFO a⏎forged"),
            "{line}"
        );
        assert!(!line.contains('\x1b'));
        let long = "é".repeat(MAX_LINE);
        let line = String::from_utf8(text.line(long.as_bytes())).unwrap();
        assert!(line.len() <= MAX_LINE + 64 && line.ends_with("…(cut)\n"));

        let json = OneLine {
            instance: "a\"b".into(),
            json: true,
        };
        let line = json.line(b"{\"level\":\"INFO\",\"message\":\"x\\ny\"}\n");
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["instance"], "a\"b");
        assert_eq!(v["message"], "x\ny");
        let long = format!("{{\"message\":\"{}\"}}", "x".repeat(MAX_LINE));
        let v: serde_json::Value = serde_json::from_slice(&json.line(long.as_bytes())).unwrap();
        assert_eq!(v["instance"], "a\"b");
        assert!(v["cut"].is_string());
    }
}
