//! The stable-Rust fuzz driver for the targets in `fuzz/targets/`.
//!
//! It needs no nightly and no extra crate: each target first gets every
//! committed seed (`fuzz/seeds/TARGET/`) and every input a libFuzzer run left
//! (`fuzz/corpus/TARGET/`), then mutants of them until its time is up. There
//! is no coverage guidance; as a coarse stand-in, an input whose outcome
//! (which error, or accepted) was not seen before joins the pool of inputs
//! to mutate. A panic — in the code under test or a broken property — or an
//! input that runs longer than the hang limit stops the run: the input is
//! saved under `fuzz/artifacts/TARGET/` and the run exits 1.
//!
//! usage (`scripts/fuzz` wraps these):
//!   fuzz check [SECS]           every target, SECS each (default 20)
//!   fuzz run TARGET [SECS]      one target
//!   fuzz repro TARGET FILE...   each file once through TARGET
//!   fuzz seeds                  rewrite fuzz/seeds/ and fuzz/dict/
//!   fuzz list                   the targets
//!
//! Environment: `CHEQ_FUZZ_SEED` (the mutation RNG's seed; printed),
//! `CHEQ_FUZZ_HANG_SECS` (the hang limit per input, default 10),
//! `CHEQ_FUZZ_REGISTRY_STRICT=0` turns off (see fuzz/targets/registry.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../../fuzz/targets/mod.rs"]
mod targets;

mod mutate;
mod seeds;

use mutate::{mutate, Rng};
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The largest input tried (a full payload is 64 KiB).
const MAX_INPUT: usize = 96 * 1024;
/// At most this many inputs are kept to mutate.
const MAX_POOL: usize = 2048;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs = |s: Option<&String>| -> Result<f64, String> {
        match s {
            None => Ok(20.0),
            Some(s) => s
                .parse()
                .map_err(|_| format!("not a number of seconds: {s}")),
        }
    };
    let result = match args.first().map(String::as_str) {
        Some("check") => secs(args.get(1)).and_then(|t| {
            let names: Vec<&str> = targets::TARGETS.iter().map(|(n, _)| *n).collect();
            fuzz_all(&names, t)
        }),
        Some("run") => match args.get(1) {
            Some(name) => secs(args.get(2)).and_then(|t| fuzz_all(&[name.as_str()], t)),
            None => Err("usage: fuzz run TARGET [SECS]".into()),
        },
        Some("repro") if args.len() >= 3 => repro(&args[1], &args[2..]),
        Some("seeds") => seeds::write_all(&root()).map_err(|e| format!("seeds: {e}")),
        Some("list") => {
            for (name, _) in targets::TARGETS {
                println!("{name}");
            }
            Ok(())
        }
        _ => Err(
            "usage: fuzz check [SECS] | run TARGET [SECS] | repro TARGET FILE... | seeds | list"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fuzz: {e}");
            ExitCode::FAILURE
        }
    }
}

fn fuzz_all(names: &[&str], secs: f64) -> Result<(), String> {
    let seed = std::env::var("CHEQ_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let hang = std::env::var("CHEQ_FUZZ_HANG_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10.0);
    println!("fuzz: CHEQ_FUZZ_SEED={seed}, {secs} s per target, hang limit {hang} s");
    let start = Instant::now();
    for (k, name) in names.iter().enumerate() {
        let target = targets::by_name(name).ok_or_else(|| format!("no target {name:?}"))?;
        fuzz_one(name, target, secs, hang, seed.wrapping_add(k as u64))?;
    }
    println!(
        "fuzz: {} target(s), no crash, panic, broken property or hang, in {:.1} s",
        names.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the watchdog sees: the input being run and since when.
type Current = Arc<Mutex<Option<(Instant, Vec<u8>)>>>;

enum Verdict {
    Done {
        execs: u64,
        pool: usize,
        classes: usize,
    },
    Failed(Vec<u8>, String),
}

fn fuzz_one(
    name: &str,
    target: targets::Target,
    secs: f64,
    hang: f64,
    seed: u64,
) -> Result<(), String> {
    let seeds = load(name)?;
    if seeds.is_empty() {
        return Err(format!("{name}: no seeds in fuzz/seeds/{name}/"));
    }
    let current: Current = Arc::new(Mutex::new(None));
    let worker = {
        let current = Arc::clone(&current);
        let name = name.to_owned();
        std::thread::Builder::new()
            .name(format!("fuzz-{name}"))
            .stack_size(64 << 20)
            .spawn(move || campaign(target, seeds, secs, seed, &current))
            .map_err(|e| format!("thread: {e}"))?
    };
    let limit = Duration::from_secs_f64(hang);
    let verdict = loop {
        if worker.is_finished() {
            break worker.join().unwrap_or_else(|_| {
                Verdict::Failed(Vec::new(), "the driver itself panicked".into())
            });
        }
        std::thread::sleep(Duration::from_millis(50));
        let stuck = match current.lock() {
            Ok(c) => c
                .as_ref()
                .filter(|(since, _)| since.elapsed() > limit)
                .map(|(_, input)| input.clone()),
            Err(_) => None,
        };
        if let Some(input) = stuck {
            // The worker cannot be stopped: report and leave the process.
            let path = save(name, "hang", &input);
            eprintln!("fuzz: {name}: HANG, an input ran more than {hang} s; saved to {path}");
            eprintln!("fuzz: reproduce with: scripts/fuzz repro {name} {path}");
            std::process::exit(1);
        }
    };
    match verdict {
        Verdict::Done {
            execs,
            pool,
            classes,
        } => {
            println!("fuzz: {name}: ok, {execs} inputs, {classes} outcome classes, pool {pool}");
            Ok(())
        }
        Verdict::Failed(input, why) => {
            let path = save(name, "crash", &input);
            Err(format!(
                "{name}: FAILED ({why}); the input is saved to {path}\n\
                 fuzz: reproduce with: scripts/fuzz repro {name} {path}"
            ))
        }
    }
}

/// Seeds first, then mutants until the time is up.
fn campaign(
    target: targets::Target,
    seeds: Vec<Vec<u8>>,
    secs: f64,
    seed: u64,
    current: &Current,
) -> Verdict {
    let set = |input: Option<&[u8]>| {
        if let Ok(mut c) = current.lock() {
            *c = input.map(|i| (Instant::now(), i.to_vec()));
        }
    };
    let run = |input: &[u8]| -> Result<u64, String> {
        set(Some(input));
        let r = catch_unwind(AssertUnwindSafe(|| target(input)));
        set(None);
        r.map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".to_owned())
        })
    };
    let mut classes = HashSet::new();
    let mut execs = 0u64;
    for s in &seeds {
        execs += 1;
        match run(s) {
            Ok(c) => {
                classes.insert(c);
            }
            Err(why) => return Verdict::Failed(s.clone(), format!("on a seed: {why}")),
        }
    }
    let n_seeds = seeds.len();
    let mut pool = seeds;
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < deadline {
        for _ in 0..32 {
            let parent = &pool[rng.below(pool.len())];
            let input = mutate(&mut rng, parent, &pool, MAX_INPUT);
            execs += 1;
            match run(&input) {
                Ok(c) => {
                    if classes.insert(c) {
                        if pool.len() < MAX_POOL {
                            pool.push(input);
                        } else {
                            let i = n_seeds + rng.below(MAX_POOL - n_seeds);
                            pool[i] = input;
                        }
                    }
                }
                Err(why) => return Verdict::Failed(input, why),
            }
        }
    }
    Verdict::Done {
        execs,
        pool: pool.len(),
        classes: classes.len(),
    }
}

/// The seeds of `name` and what libFuzzer runs left in its corpus.
fn load(name: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for dir in [
        root().join("seeds").join(name),
        root().join("corpus").join(name),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files.iter().filter(|f| f.is_file()) {
            let bytes = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
            out.push(bytes);
        }
    }
    Ok(out)
}

fn save(name: &str, kind: &str, input: &[u8]) -> String {
    let dir = root().join("artifacts").join(name);
    let path = dir.join(format!("{kind}-{:016x}", targets::fnv(input)));
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, input)) {
        eprintln!("fuzz: could not save {}: {e}", path.display());
    }
    relative(&path)
}

fn relative(path: &Path) -> String {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(&base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn repro(name: &str, files: &[String]) -> Result<(), String> {
    let target = targets::by_name(name).ok_or_else(|| format!("no target {name:?}"))?;
    for f in files {
        let input = std::fs::read(f).map_err(|e| format!("{f}: {e}"))?;
        let class = target(&input);
        println!("fuzz: {name}: {f}: ok (outcome class {class:016x})");
    }
    Ok(())
}
