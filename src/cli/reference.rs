//! `cheq help-reference` (hidden): the reference of every `cheq` command in
//! markdown, rendered from the command line's own long help (clap), so that
//! the reference in `docs/operations.md` says what the program does. With
//! `--update FILE` it replaces what lies between the two marker lines
//! [`BEGIN`] and [`END`] in FILE and keeps the rest; without, it prints the
//! text that belongs there. `tests/cli.rs` fails when the file differs.

use super::{display_path, write_out, Cli, CliError};
use clap::CommandFactory;
use std::path::{Path, PathBuf};

/// The line before the generated reference (the start of the line).
pub const BEGIN: &str = "<!-- cheq help-reference: begin";
/// The line after it.
pub const END: &str = "<!-- cheq help-reference: end -->";

/// The command that regenerates the reference in the project's docs.
pub const REGENERATE: &str = "cargo run -- help-reference --update docs/operations.md";

/// Print the reference of every command in markdown, from their help.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Replace the reference between the marker lines of this markdown file
    /// (`<!-- cheq help-reference: begin … -->` and
    /// `<!-- cheq help-reference: end -->`) instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub update: Option<PathBuf>,
}

pub fn run(args: Args, out: &mut dyn std::io::Write) -> Result<(), CliError> {
    let reference = markdown();
    match args.update {
        None => write_out(out, &reference),
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|source| CliError::Read {
                path: display_path(&path),
                source,
            })?;
            let updated =
                replace_between_markers(&text, &reference).ok_or_else(|| no_markers(&path))?;
            let said = if updated == text {
                "was up to date"
            } else {
                std::fs::write(&path, updated).map_err(|source| CliError::Write {
                    path: display_path(&path),
                    source,
                })?;
                "is updated"
            };
            write_out(
                out,
                &format!("the command reference in {} {said}\n", path.display()),
            )
        }
    }
}

fn no_markers(path: &Path) -> CliError {
    CliError::NoReferenceMarkers {
        path: display_path(path),
    }
}

/// What lies between the marker lines of `text` (both excluded), if it has
/// them, in order.
pub fn between_markers(text: &str) -> Option<&str> {
    let (start, end) = marker_span(text)?;
    Some(&text[start..end])
}

/// `text` with what lies between its marker lines replaced by `reference`.
pub fn replace_between_markers(text: &str, reference: &str) -> Option<String> {
    let (start, end) = marker_span(text)?;
    Some(format!("{}{reference}{}", &text[..start], &text[end..]))
}

/// The byte range between the end of the begin marker's line and the start
/// of the end marker's line.
fn marker_span(text: &str) -> Option<(usize, usize)> {
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        match start {
            None if line.starts_with(BEGIN) => start = Some(offset + line.len()),
            Some(s) if line.trim_end() == END => return Some((s, offset)),
            _ => {}
        }
        offset += line.len();
    }
    None
}

/// The reference: a table of the commands, then each command's long help.
pub fn markdown() -> String {
    let mut root = Cli::command();
    // Fills in each subcommand's full name ("cheq store export") for its
    // usage line.
    root.build();
    let mut commands = Vec::new();
    collect(&root, "cheq", &mut commands);
    let mut md = String::from("\n| command | what it does |\n|---|---|\n");
    for (name, cmd) in &commands {
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        md.push_str(&format!(
            "| [`{name}`](#{anchor}) | {about} |\n",
            anchor = anchor(name),
            about = about.trim_end_matches('.').replace('|', "\\|"),
        ));
    }
    for (name, cmd) in &commands {
        let help = cmd.clone().render_long_help().to_string();
        let help: Vec<&str> = help.lines().map(str::trim_end).collect();
        let help = help.join("\n");
        let fence = fence_for(&help);
        md.push_str(&format!(
            "\n### `{name}`\n\n{fence}text\n{}\n{fence}\n",
            help.trim()
        ));
    }
    md.push('\n');
    md
}

/// Every command that is shown in `cheq --help`, depth first, with its full
/// name; `help` and hidden ones left out.
fn collect(cmd: &clap::Command, name: &str, into: &mut Vec<(String, clap::Command)>) {
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let full = format!("{name} {}", sub.get_name());
        into.push((full.clone(), sub.clone()));
        collect(sub, &full, into);
    }
}

/// The anchor a markdown renderer (GitHub's) gives the heading `` `name` ``.
fn anchor(name: &str) -> String {
    name.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// A code fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat(longest.max(2) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shown_command_is_in_the_reference() {
        let md = markdown();
        for name in [
            "cheq audit",
            "cheq demo",
            "cheq store export",
            "cheq store import",
            "cheq keys rotate",
            "cheq user add",
        ] {
            assert!(md.contains(&format!("\n### `{name}`\n")), "{name}");
        }
        assert!(md.contains("--colocated") && md.contains("--passkeys"));
        assert!(
            !md.contains("help-reference"),
            "a hidden command is left out"
        );
        assert!(!md.contains("### `cheq help`"));
    }

    #[test]
    fn the_text_between_the_markers_is_replaced_and_the_rest_kept() {
        let text = format!("# Doc\n\nbefore\n{BEGIN}: generated -->\nold\n{END}\nafter\n");
        let new = replace_between_markers(&text, "\nnew\n").unwrap();
        assert_eq!(
            new,
            format!("# Doc\n\nbefore\n{BEGIN}: generated -->\n\nnew\n{END}\nafter\n")
        );
        assert_eq!(between_markers(&new), Some("\nnew\n"));
        assert_eq!(between_markers("no markers"), None);
        assert_eq!(between_markers(&format!("{END}\n{BEGIN} -->\n")), None);
    }

    #[test]
    fn anchors_and_fences() {
        assert_eq!(anchor("cheq store export"), "cheq-store-export");
        assert_eq!(anchor("cheq resource-server"), "cheq-resource-server");
        assert_eq!(fence_for("no ticks"), "```");
        assert_eq!(fence_for("a ```` b"), "`````");
    }
}
