//! The layers of ARCHITECTURE.md, enforced: every source file is read, its
//! test module cut off, and what it names is checked against the rules of its
//! layer. A forbidden import fails this test with the file and the line.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

/// One rule: files whose path (relative to `src/`) starts with one of
/// `files` must not contain any of `forbidden` (outside their tests).
struct Rule {
    layer: &'static str,
    files: &'static [&'static str],
    except: &'static [&'static str],
    forbidden: &'static [&'static str],
}

const HTTP_SERVER: &[&str] = &["actix_web", "actix_http", "askama", "StatusCode"];

fn rules() -> Vec<Rule> {
    vec![
        Rule {
            layer: "store",
            files: &["store/"],
            except: &[],
            forbidden: &[
                "crate::confirm",
                "crate::resource",
                "crate::httpkit",
                "crate::cli",
                "actix_web",
                "askama",
            ],
        },
        Rule {
            layer: "store traits (no backend)",
            files: &["store/cs.rs", "store/rs.rs", "store/a2a.rs"],
            except: &[],
            forbidden: &["sled::", "sled_"],
        },
        Rule {
            layer: "CS domain",
            files: &[
                "confirm/flow/",
                "confirm/auth/",
                "confirm/view.rs",
                "confirm/voice.rs",
                "confirm/warnings.rs",
                "confirm/seal.rs",
                "confirm/registry.rs",
                "confirm/directory.rs",
                "confirm/registration.rs",
                "confirm/config.rs",
                "confirm/config/",
                "confirm/link.rs",
                "confirm/passkeys.rs",
            ],
            except: &[],
            forbidden: &[
                "actix_web",
                "actix_http",
                "askama",
                "StatusCode",
                "crate::httpkit",
                "crate::confirm::web",
                "crate::confirm::api",
                "crate::confirm::status",
                "super::web",
                "super::api",
                "sled::",
                "sled_cs",
                "utoipa",
            ],
        },
        Rule {
            layer: "CS clients of resource servers and identity providers",
            files: &["confirm/fetch.rs", "confirm/fetch/", "confirm/oidc/"],
            except: &[],
            forbidden: &[
                "actix_web",
                "askama",
                "crate::httpkit",
                "super::web",
                "super::api",
                "sled",
            ],
        },
        Rule {
            layer: "CS",
            files: &["confirm/"],
            except: &[],
            forbidden: &["crate::resource", "crate::cli"],
        },
        Rule {
            layer: "RS domain",
            files: &[
                "resource/cheq_rs/",
                "resource/tools.rs",
                "resource/config.rs",
                "resource/agent.rs",
                "resource/trusted_cs.rs",
                "resource/registration.rs",
                "resource/assertion.rs",
            ],
            except: &[],
            forbidden: HTTP_SERVER,
        },
        Rule {
            layer: "RS domain (not its front end)",
            files: &[
                "resource/cheq_rs/",
                "resource/tools.rs",
                "resource/config.rs",
                "resource/agent.rs",
                "resource/trusted_cs.rs",
                "resource/registration.rs",
                "resource/assertion.rs",
            ],
            except: &[],
            forbidden: &[
                "crate::httpkit",
                "resource::error",
                "resource::server",
                "resource::oauth",
            ],
        },
        Rule {
            layer: "RS",
            files: &["resource/"],
            except: &["resource/server.rs"],
            forbidden: &["crate::confirm", "crate::cli", "sled"],
        },
        Rule {
            layer: "RS start-up",
            files: &["resource/server.rs"],
            except: &[],
            forbidden: &["crate::confirm", "crate::cli"],
        },
        Rule {
            layer: "the confirmation inside the RS (composition of both)",
            files: &["colocated/"],
            except: &[],
            forbidden: &["crate::cli", "sled"],
        },
        Rule {
            layer: "MCP bridge domain",
            files: &[
                "mcp/lib.rs",
                "mcp/pending.rs",
                "mcp/state.rs",
                "mcp/schema.rs",
            ],
            except: &[],
            forbidden: &[
                "rmcp",
                "hyper",
                "actix_web",
                "askama",
                "crate::confirm",
                "crate::store",
                "crate::httpkit",
                "sled",
            ],
        },
        Rule {
            layer: "MCP bridge",
            files: &["mcp/"],
            except: &[],
            forbidden: &["crate::confirm", "crate::store", "actix_web", "sled"],
        },
        Rule {
            layer: "A2A bridge domain",
            files: &["a2a/"],
            except: &[],
            forbidden: &[
                "rmcp",
                "hyper",
                "actix_web",
                "askama",
                "cheq_mcp",
                "cheq_confirm",
                "sled",
            ],
        },
        Rule {
            layer: "A2A front end",
            files: &["a2a.rs"],
            except: &[],
            forbidden: &[
                "crate::confirm",
                "crate::store",
                "crate::mcp",
                "rmcp",
                "sled",
            ],
        },
        Rule {
            layer: "A2A start-up (opens the tasks' backend)",
            files: &["cli/a2a.rs"],
            except: &[],
            forbidden: &[
                "crate::confirm",
                "crate::mcp",
                "rmcp",
                "store::cs",
                "store::rs",
            ],
        },
        Rule {
            layer: "HTTP kit",
            files: &["httpkit.rs"],
            except: &[],
            forbidden: &[
                "crate::confirm",
                "crate::resource",
                "crate::store",
                "crate::cli",
            ],
        },
        Rule {
            layer: "key sets (own and peers')",
            files: &["keyring/", "peerkeys.rs"],
            except: &[],
            forbidden: &[
                "crate::store",
                "crate::confirm",
                "crate::resource",
                "crate::httpkit",
                "crate::cli",
                "actix_web",
                "askama",
                "sled",
            ],
        },
        Rule {
            layer: "shared helpers",
            files: &[
                "time.rs",
                "text.rs",
                "testkit.rs",
                "throttle.rs",
                "recent.rs",
            ],
            except: &[],
            forbidden: &[
                "crate::cheq",
                "crate::sign",
                "crate::store",
                "crate::confirm",
                "crate::resource",
                "crate::httpkit",
                "crate::cli",
            ],
        },
        Rule {
            layer: "everything but the packed form of documents",
            files: &[""],
            except: &["store/packed.rs"],
            forbidden: &["zstd::"],
        },
        Rule {
            layer: "everything below the CLI",
            files: &[""],
            except: &["cli/", "main.rs"],
            forbidden: &["crate::cli", "cheq::cli"],
        },
    ]
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The file without its test module(s) and without comments.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skipping_tests = false;
    let mut depth = 0i32;
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim_start();
        if !skipping_tests && trimmed.starts_with("#[cfg(test)]") {
            // The item that follows is test-only: skip it to its end.
            skipping_tests = true;
            depth = 0;
            continue;
        }
        if skipping_tests {
            depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
            if depth <= 0 && (line.contains('}') || line.trim_end().ends_with(';')) {
                skipping_tests = false;
            }
            continue;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push((n + 1, code.to_owned()));
        let _ = lines.peek();
    }
    out
}

#[test]
fn no_layer_imports_what_it_must_not() {
    // The crate `cheq` and the store crate, whose files the rules name as
    // `store/…` (the store's layers within it are still read from its text;
    // what it may not import at all, the compiler holds it to).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for (root, prefix) in [
        (manifest.join("src"), ""),
        (manifest.join("crates/cheq-store/src"), "store/"),
        (manifest.join("crates/cheq-support/src"), ""),
        (manifest.join("crates/cheq-confirm/src"), "confirm/"),
        (manifest.join("crates/cheq-resource/src"), "resource/"),
        (manifest.join("crates/cheq-mcp/src"), "mcp/"),
        (manifest.join("crates/cheq-a2a/src"), "a2a/"),
    ] {
        let mut found = Vec::new();
        sources(&root, &mut found);
        files.extend(found.into_iter().map(|f| (root.clone(), prefix, f)));
    }
    assert!(files.len() > 40, "found only {} source files", files.len());
    let rules = rules();
    let mut violations = Vec::new();
    let mut checked = 0;
    for (root, prefix, file) in &files {
        let rel = format!(
            "{prefix}{}",
            file.strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        );
        let text = std::fs::read_to_string(file).unwrap();
        let code = code_of(&text);
        for rule in &rules {
            let applies = rule.files.iter().any(|f| rel.starts_with(f))
                && !rule.except.iter().any(|e| rel.starts_with(e));
            if !applies {
                continue;
            }
            checked += 1;
            for (n, line) in &code {
                for word in rule.forbidden {
                    if line.contains(word) {
                        violations.push(format!(
                            "src/{rel}:{n}: the {} layer must not use `{word}`: {}",
                            rule.layer,
                            line.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 50, "rules applied only {checked} times");
    assert!(
        violations.is_empty(),
        "forbidden imports (see ARCHITECTURE.md):\n{}",
        violations.join("\n")
    );
}

/// What the A2A bridge may name of the store: the trait of its tasks
/// (`cheq_store::a2a`) and the store's error, never a backend or another
/// part (the front end's start-up opens the backend).
fn a2a_store_uses(code: &[(usize, String)]) -> Vec<(usize, String)> {
    const ALLOWED: &[&str] = &["cheq_store::a2a::", "cheq_store::StoreError"];
    code.iter()
        .filter(|(_, line)| {
            line.match_indices("cheq_store")
                .any(|(i, _)| !ALLOWED.iter().any(|a| line[i..].starts_with(a)))
        })
        .cloned()
        .collect()
}

#[test]
fn the_a2a_bridge_uses_only_the_trait_of_its_tasks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/cheq-a2a/src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut seen = 0;
    let mut violations = Vec::new();
    for file in files {
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        seen += code
            .iter()
            .filter(|(_, l)| l.contains("cheq_store"))
            .count();
        for (n, line) in a2a_store_uses(&code) {
            violations.push(format!("{}:{n}: {}", file.display(), line.trim()));
        }
    }
    assert!(seen >= 2, "the bridge names the store {seen} times");
    assert!(
        violations.is_empty(),
        "the A2A bridge names more of the store than its tasks' trait (ARCHITECTURE.md):\n{}",
        violations.join("\n")
    );
    // The check sees what it must refuse.
    let bad = code_of(
        "use cheq_store::sled_a2a;\nuse cheq_store::{a2a, pg};\nuse cheq_store::a2a::TaskStore;\n",
    );
    assert_eq!(a2a_store_uses(&bad).len(), 2);
}

#[test]
fn the_checker_sees_a_forbidden_import_and_ignores_tests() {
    let bad = "use actix_web::HttpResponse;\nfn f() {}\n";
    assert!(code_of(bad).iter().any(|(_, l)| l.contains("actix_web")));
    let test_only = "fn f() {}\n#[cfg(test)]\nmod tests {\n    use actix_web::test;\n    fn g() {\n    }\n}\nfn h() { crate::cli::x(); }\n";
    let code = code_of(test_only);
    assert!(!code.iter().any(|(_, l)| l.contains("actix_web")));
    assert!(code.iter().any(|(_, l)| l.contains("crate::cli")));
    let commented = "// use actix_web::x;\nlet a = 1; // crate::cli\n";
    assert!(!code_of(commented)
        .iter()
        .any(|(_, l)| l.contains("actix_web") || l.contains("crate::cli")));
}

/// The shell functions a script defines at its top level (`name() {`).
fn shell_functions(script: &str) -> Vec<(usize, String)> {
    script
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let name = line.strip_suffix("() {")?;
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            valid.then(|| (i + 1, name.to_owned()))
        })
        .collect()
}

/// A shell script that defines a function twice runs only the last
/// definition, silently: `scripts/bench core --json`, a fixed interface,
/// once ran the flow count under callgrind instead of the per-operation
/// counts that way.
#[test]
fn no_script_defines_a_function_twice() {
    let mut found = 0;
    let mut twice = Vec::new();
    for entry in std::fs::read_dir("scripts").unwrap() {
        let path = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut seen = std::collections::HashMap::new();
        for (line, name) in shell_functions(&text) {
            found += 1;
            if let Some(first) = seen.insert(name.clone(), line) {
                twice.push(format!(
                    "{}:{line}: {name} (first at line {first})",
                    path.display()
                ));
            }
        }
    }
    assert!(
        found >= 10,
        "only {found} shell functions found under scripts/"
    );
    assert!(twice.is_empty(), "defined twice:\n{}", twice.join("\n"));
}

#[test]
fn the_script_checker_sees_a_second_definition() {
    let script = "a() {\n  :\n}\nb_2() {\n}\n  c() {\nif x() {\na() {\n";
    let names: Vec<String> = shell_functions(script)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(names, ["a", "b_2", "a"]);
}

/// The layers below the front ends are crates of their own: the compiler
/// keeps out of each what it does not depend on, as long as its dependencies
/// bring none of it. This reads their dependency trees as cargo resolves
/// them: the signing core has no I/O, runtime or HTTP; the store no web
/// framework and no HTTP client; the shared helpers and the CS domain no web
/// framework (and the shared helpers no database driver); the RS domain and
/// the MCP and A2A bridges no web framework (and the A2A bridge no MCP).
#[test]
fn the_lower_crates_depend_on_no_runtime_http_or_web() {
    for (krate, forbidden) in [
        (
            "cheq-core",
            &[
                "tokio", "actix", "reqwest", "hyper", "sled", "mio", "askama", "postgres",
            ][..],
        ),
        (
            "cheq-store",
            &["actix", "askama", "reqwest", "openidconnect", "rmcp"][..],
        ),
        (
            "cheq-support",
            &["actix", "askama", "postgres", "openidconnect", "rmcp"][..],
        ),
        ("cheq-confirm", &["actix", "askama", "utoipa", "rmcp"][..]),
        (
            "cheq-resource",
            &["actix", "askama", "utoipa", "rmcp", "openidconnect"][..],
        ),
        (
            "cheq-mcp",
            &["actix", "askama", "utoipa", "openidconnect"][..],
        ),
        (
            "cheq-a2a",
            &["actix", "askama", "utoipa", "openidconnect", "rmcp"][..],
        ),
    ] {
        dependencies_exclude(krate, forbidden);
    }
}

/// Fails when `krate`'s normal dependency tree holds a crate whose name
/// starts with (or has a part named) one of `forbidden`.
fn dependencies_exclude(krate: &str, forbidden: &[&str]) {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "-p",
            krate,
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(tree.lines().count() > 10, "{tree}");
    for line in tree.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        for io in forbidden {
            assert!(
                !name.starts_with(io) && !name.contains(&format!("-{io}")),
                "{krate} depends on {line}"
            );
        }
    }
}
