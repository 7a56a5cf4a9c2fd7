//! Crash tests on real processes: a test runs itself again as a child
//! process, which does its part, says so on its standard output and waits;
//! the parent then kills it with SIGKILL (no destructor, no clean shutdown)
//! and looks at what it left on disk.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Upper bound of every wait for the child.
const TIMEOUT: Duration = Duration::from_secs(60);

/// A child process, killed when dropped (a failed test leaves none behind).
pub struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// In the child: prints `marker` and `what` on one line, then waits to be
/// killed.
pub fn report_and_wait(marker: &str, what: &str) -> ! {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{marker} {what}").unwrap();
    stdout.flush().unwrap();
    drop(stdout);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Runs the test `test` of this test binary as a child process, with `var`
/// set to `dir`, and returns it once it has printed `marker`, with what
/// followed the marker on that line.
pub fn start(test: &str, var: &str, dir: &Path, marker: &str) -> (Killed, String) {
    let mut child = Killed(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(var, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // Read the child's stdout on a thread so that the wait is bounded.
    let stdout = child.0.stdout.take().unwrap();
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            // libtest may print "test … ... " on the same line first.
            Ok(Ok(line)) => {
                if let Some((_, rest)) = line.split_once(&format!("{marker} ")) {
                    return (child, rest.trim().to_owned());
                }
            }
            Ok(Err(e)) => panic!("reading the child's stdout: {e}"),
            Err(e) => panic!("the child never printed {marker}: {e}"),
        }
    }
}

/// Kills `child` with SIGKILL and checks that it died of it.
pub fn kill(mut child: Killed) {
    child.0.kill().unwrap(); // SIGKILL on Unix
    let deadline = Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the killed child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "{status:?}");
    }
}
