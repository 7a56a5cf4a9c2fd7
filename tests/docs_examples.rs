//! The client examples of `docs/mcp.md` and `docs/a2a.md` (PROTOCOL.md §11,
//! §13), run as written: each is the fenced `python` block after a line
//! `<!-- example: NAME … -->`, taken from the markdown, run with `python3`
//! against `cheq demo` (a real process, as a reader starts it) and the
//! bridge in front of its RS (`cheq mcp`, `cheq a2a`, with the demo agent's
//! defaults). The user's side is done over HTTP as a browser would: the
//! test opens the link the example prints, signs in as alice and accepts;
//! the example must then print what its doc says it prints. Each runs once
//! more against a bridge given `--token-file`, with the token in the
//! environment variable its doc names, up to the link. The official
//! SDKs come from `tests/mcp/install.sh` and `tests/a2a/install.sh`;
//! without them the examples are skipped, saying so.
//!
//! The demo's start is also checked for noise: a peer's keys missed while
//! the other server starts are no line at the default level.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The fenced block of `lang` after the marker `<!-- example: NAME ` in the
/// markdown file `doc` (relative to the repository).
fn example(doc: &str, name: &str, lang: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    let text = std::fs::read_to_string(&path).unwrap();
    extract(&text, name, lang).unwrap_or_else(|| {
        panic!("{doc} has no ```{lang} block after a line <!-- example: {name} … -->")
    })
}

fn extract(text: &str, name: &str, lang: &str) -> Option<String> {
    let marker = format!("<!-- example: {name} ");
    let mut lines = text.lines().skip_while(|l| !l.starts_with(&marker)).skip(1);
    let open = lines.find(|l| !l.trim().is_empty())?;
    if open.trim() != format!("```{lang}") {
        return None;
    }
    let mut code = String::new();
    for line in lines {
        if line.trim() == "```" {
            return Some(code);
        }
        code.push_str(line);
        code.push('\n');
    }
    None
}

#[test]
fn the_marker_finds_its_block_and_only_that() {
    let md = "text\n<!-- example: a (run) -->\n```python\nprint(1)\n```\n\
              <!-- example: b -->\n```sh\nls\n```\n<!-- example: c -->\n```python\nopen\n";
    assert_eq!(extract(md, "a", "python").as_deref(), Some("print(1)\n"));
    assert_eq!(extract(md, "b", "python"), None, "another language");
    assert_eq!(extract(md, "c", "python"), None, "an unclosed block");
    assert_eq!(extract(md, "d", "python"), None, "no marker");
}

/// An example running: its stdin, and its stdout a line at a time.
struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: std::path::PathBuf,
}

impl Script {
    fn run(dir: &Path, name: &str, code: &str, args: &[&str], envs: &[(&str, &str)]) -> Script {
        let file = dir.join(format!("{name}.py"));
        std::fs::write(&file, code).unwrap();
        let stderr = dir.join(format!("{name}.stderr"));
        let mut child = Command::new("python3")
            .arg(&file)
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .env_remove("CHEQ_MCP_TOKEN")
            .env_remove("CHEQ_A2A_TOKEN")
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = lines_of(child.stdout.take().unwrap());
        Script {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    fn said(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.seen.join("\n"),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    /// The first line (from now) holding `prefix`, from it on, within 60 s
    /// (an `input` prompt, printed without a line break, may come before).
    fn line_starting(&mut self, prefix: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(at) = line.find(prefix) {
                        return line[at..].to_owned();
                    }
                }
                Err(_) => panic!("no line starting {prefix:?}; {}", self.said()),
            }
        }
    }

    /// Waits (bounded) for the script's end; its exit status.
    async fn end(&mut self) -> std::process::ExitStatus {
        for _ in 0..600 {
            if let Some(status) = self.child.try_wait().unwrap() {
                while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.seen.push(line);
                }
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the example did not end; {}", self.said());
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The demo as a reader runs it, on free ports.
struct Demo {
    proc: Proc,
    cs_url: String,
    rs_url: String,
}

async fn start_demo(dir: &Path) -> Demo {
    let (cs_port, rs_port) = (free_port(), free_port());
    let cs_url = format!("http://127.0.0.1:{cs_port}");
    let rs_url = format!("http://127.0.0.1:{rs_port}");
    let data = dir.join("demo");
    let proc = start_server_with(
        "demo",
        &[
            "demo",
            "--data-dir",
            data.to_str().unwrap(),
            "--cs-port",
            &cs_port.to_string(),
            "--rs-port",
            &rs_port.to_string(),
        ],
        &[("CHEQ_DEMO_PASSWORD", ALICE_PW)],
        &dir.join("demo.log"),
        &cs_url,
    )
    .await;
    Demo {
        proc,
        cs_url,
        rs_url,
    }
}

/// `cheq mcp` or `cheq a2a` in front of the demo's RS, with the demo
/// agent's defaults (no `--client-id`, no `CHEQ_AGENT_SECRET`), as the docs
/// start it; its base URL once it answers.
async fn start_bridge(demo: &Demo, dir: &Path, command: &str, extra: &[&str]) -> (Proc, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec![command, "--rs", &demo.rs_url, "--listen", &listen];
    args.extend_from_slice(extra);
    let proc = Proc::spawn(
        &format!("cheq {command}"),
        &args,
        &dir.join(format!("{command}-{}.log", extra.len())),
    );
    let base = format!("http://{listen}");
    let http = http_client();
    for _ in 0..200 {
        if http.get(format!("{base}/healthz")).send().await.is_ok() {
            return (proc, base);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the bridge did not start:\n{}", proc.log());
}

/// What the user does with a printed start link: open it (the CS's start
/// link, naming only the resource URI), sign in as alice, accept.
async fn accept_at(demo: &Demo, link: &str) {
    let url = url::Url::parse(link).unwrap();
    assert_eq!(
        url.origin().ascii_serialization(),
        demo.cs_url,
        "the link is the CS's: {link}"
    );
    let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    assert_eq!(pairs.len(), 1, "{link}");
    assert_eq!(pairs[0].0, "resource_uri", "{link}");
    let mut b = Browser::new(&demo.cs_url);
    let (path, page) = b.open(url.path(), &pairs[0].1, "alice", ALICE_PW).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let done = b.decide(&path, &page, "accept").await;
    assert_eq!(done.status, 200, "{}", done.text);
}

#[actix_web::test]
async fn the_mcp_and_a2a_examples_run_as_written_against_the_demo() {
    use cheq::store::testing::{can_run, Outside};
    let mcp = can_run("the MCP example of docs/mcp.md", &[Outside::Python("mcp")]);
    let a2a = can_run(
        "the A2A example of docs/a2a.md",
        &[Outside::Python("a2a.client")],
    );
    // Taken from the docs first: a lost marker fails even without Python.
    let mcp_code = example("docs/mcp.md", "mcp-client", "python");
    let a2a_code = example("docs/a2a.md", "a2a-client", "python");
    let dir = tempfile::tempdir().unwrap();
    let demo = start_demo(dir.path()).await;

    if mcp {
        let (bridge, base) = start_bridge(&demo, dir.path(), "mcp", &[]).await;
        let url = format!("{base}/mcp");
        let mut script = Script::run(dir.path(), "mcp_example", &mcp_code, &[&url], &[]);
        let tools = script.line_starting("tools:");
        assert!(tools.contains("book_flight"), "{tools}");
        // The elicitation: "Confirm 'book_flight' at <CS origin>: <link>".
        let asked = script.line_starting("Confirm 'book_flight' at ");
        let link = asked.rsplit(": ").next().unwrap().to_owned();
        accept_at(&demo, &link).await;
        // Enter: the SDK asks again and gets the outcome.
        writeln!(script.stdin.as_mut().unwrap()).unwrap();
        let outcome = script.line_starting("outcome:");
        assert!(
            outcome.starts_with("outcome: {'status': 'accepted', 'result': {"),
            "{outcome}; {}",
            script.said()
        );
        assert!(outcome.contains("CONFIRMED"), "{outcome}");
        drop(script.stdin.take());
        let status = script.end().await;
        assert!(status.success(), "{status}; {}", script.said());
        let said = script.said();
        assert!(!said.contains("Traceback"), "{said}");
        assert!(!said.contains("/cheq/results/"), "{said}");
        drop(bridge);
    }

    if a2a {
        let (bridge, base) = start_bridge(&demo, dir.path(), "a2a", &[]).await;
        let mut script = Script::run(dir.path(), "a2a_example", &a2a_code, &[&base], &[]);
        script.line_starting("TASK_STATE_AUTH_REQUIRED");
        let link = script.line_starting("open: ")["open: ".len()..].to_owned();
        accept_at(&demo, &link).await;
        let result = script.line_starting("result: ");
        assert!(result.contains("CONFIRMED"), "{result}");
        script.line_starting("TASK_STATE_COMPLETED");
        let status = script.end().await;
        assert!(status.success(), "{status}; {}", script.said());
        assert!(!script.said().contains("Traceback"), "{}", script.said());
        drop(bridge);
    }

    // A bridge with --token-file: the examples send the token they are
    // given, and reach the confirmation as before.
    for (command, run, code, env, path) in [
        ("mcp", mcp, &mcp_code, "CHEQ_MCP_TOKEN", "/mcp"),
        ("a2a", a2a, &a2a_code, "CHEQ_A2A_TOKEN", ""),
    ] {
        if !run {
            continue;
        }
        let file = dir.path().join(format!("{command}.token"));
        let (bridge, base) = start_bridge(
            &demo,
            dir.path(),
            command,
            &["--token-file", file.to_str().unwrap()],
        )
        .await;
        let token = std::fs::read_to_string(&file).unwrap();
        let url = format!("{base}{path}");
        let name = format!("{command}_example_token");
        let mut script = Script::run(dir.path(), &name, code, &[&url], &[(env, token.trim())]);
        let link = if command == "mcp" {
            script.line_starting("Confirm 'book_flight' at ")
        } else {
            script.line_starting("open: ")
        };
        assert!(link.contains("resource_uri="), "{link}");
        drop(script);
        drop(bridge);
    }

    // Both servers fetched each other's keys while the other was starting:
    // nothing of it at the default level.
    let log = demo.proc.log();
    assert!(!log.contains("none read yet"), "{log}");
    assert!(!log.contains("fetching trusted keys"), "{log}");
}
