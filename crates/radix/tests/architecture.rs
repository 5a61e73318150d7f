//! The workspace's dependency graph against `ARCHITECTURE.md`.
//!
//! Each crate's entry in `ARCHITECTURE.md` states, in backticks after
//! `*Uses:*`, `*Tests use:*` and `*Never, even indirectly:*`, the crates it
//! depends on (normal and build dependencies), the ones only its tests and
//! benches use, and the ones it must not reach through any chain of normal or
//! build dependencies. `cargo metadata` gives the real graph; the document is
//! the only list, so the two cannot drift: a new dependency, a dropped one or a
//! forbidden one reached through another crate fails this test.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What `ARCHITECTURE.md` says of one crate.
#[derive(Debug, Default)]
struct Entry {
    uses: BTreeSet<String>,
    tests_use: BTreeSet<String>,
    never: BTreeSet<String>,
}

/// The workspace as `cargo metadata` resolves it, by package name.
#[derive(Debug, Default)]
struct Graph {
    members: BTreeSet<String>,
    /// Per member, its normal and build dependencies.
    uses: BTreeMap<String, BTreeSet<String>>,
    /// Per member, its dev-dependencies.
    tests_use: BTreeMap<String, BTreeSet<String>>,
    /// Per package, the packages it needs to build (normal and build edges).
    edges: BTreeMap<String, BTreeSet<String>>,
}

const USES: &str = "*Uses:*";
const TESTS_USE: &str = "*Tests use:*";
const NEVER: &str = "*Never, even indirectly:*";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn architecture_md() -> String {
    let path = workspace_root().join("ARCHITECTURE.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The entries of the `## Crates` section, by crate name. An entry starts at
/// a line opening with `` `crates/<name>` `` and runs to the next one.
fn parse(doc: &str) -> Result<BTreeMap<String, Entry>, String> {
    let doc = format!("\n{doc}");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Crates"))
        .ok_or("ARCHITECTURE.md has no `## Crates` section")?;
    let mut entries = BTreeMap::new();
    let mut current: Option<(String, String)> = None;
    let mut flush = |cur: Option<(String, String)>| -> Result<(), String> {
        if let Some((name, text)) = cur {
            let uses = list(&text, USES)
                .ok_or_else(|| format!("the entry of {name} has no {USES} line"))?;
            let entry = Entry {
                uses,
                tests_use: list(&text, TESTS_USE).unwrap_or_default(),
                never: list(&text, NEVER).unwrap_or_default(),
            };
            if entries.insert(name.clone(), entry).is_some() {
                return Err(format!("{name} has two entries"));
            }
        }
        Ok(())
    };
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("`crates/") {
            let name = rest.split('`').next().unwrap_or_default().to_string();
            flush(current.take())?;
            current = Some((name, String::new()));
        } else if let Some((_, text)) = &mut current {
            text.push_str(line);
            text.push('\n');
        }
    }
    flush(current)?;
    Ok(entries)
}

/// The backticked names after `marker`, up to the next `*` or blank line.
fn list(text: &str, marker: &str) -> Option<BTreeSet<String>> {
    let start = text.find(marker)? + marker.len();
    let rest = &text[start..];
    let end = [rest.find('*'), rest.find("\n\n")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(rest.len());
    Some(
        rest[..end]
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect(),
    )
}

fn metadata() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name_of: BTreeMap<&str, &str> = json["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = Graph::default();
    for id in json["workspace_members"].as_array().unwrap() {
        graph
            .members
            .insert(name_of[id.as_str().unwrap()].to_string());
    }
    for p in json["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap();
        if !graph.members.contains(name) {
            continue;
        }
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap().to_string();
            let map = match d["kind"].as_str() {
                Some("dev") => &mut graph.tests_use,
                _ => &mut graph.uses,
            };
            map.entry(name.to_string()).or_default().insert(dep);
        }
    }
    for node in json["resolve"]["nodes"].as_array().unwrap() {
        let from = name_of[node["id"].as_str().unwrap()].to_string();
        let deps = graph.edges.entry(from).or_default();
        for d in node["deps"].as_array().unwrap() {
            let builds = d["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].as_str() != Some("dev"));
            if builds {
                deps.insert(name_of[d["pkg"].as_str().unwrap()].to_string());
            }
        }
    }
    graph
}

/// The chain of normal/build dependencies from `from` to `to`, if any.
fn chain(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(n) = queue.pop_front() {
        for d in graph.edges.get(n).into_iter().flatten() {
            if d == from || parent.contains_key(d.as_str()) {
                continue;
            }
            parent.insert(d, n);
            if d == to {
                let mut res = vec![to.to_string()];
                let mut cur = to;
                while cur != from {
                    cur = parent[cur];
                    res.push(cur.to_string());
                }
                res.reverse();
                return Some(res);
            }
            queue.push_back(d);
        }
    }
    None
}

/// Every way the graph departs from the document, one sentence each.
fn check(doc: &BTreeMap<String, Entry>, graph: &Graph) -> Vec<String> {
    let mut errors = vec![];
    let empty = BTreeSet::new();
    for name in &graph.members {
        let Some(entry) = doc.get(name) else {
            errors.push(format!("{name} has no entry in ARCHITECTURE.md"));
            continue;
        };
        for (what, said, real) in [
            (USES, &entry.uses, graph.uses.get(name).unwrap_or(&empty)),
            (
                TESTS_USE,
                &entry.tests_use,
                graph.tests_use.get(name).unwrap_or(&empty),
            ),
        ] {
            for d in real.difference(said) {
                errors.push(format!(
                    "{name} depends on {d}, which its {what} list does not name"
                ));
            }
            for d in said.difference(real) {
                errors.push(format!(
                    "{name}'s {what} list names {d}, which it does not depend on"
                ));
            }
        }
        for d in &entry.never {
            if let Some(path) = chain(graph, name, d) {
                errors.push(format!(
                    "{name} must never depend on {d}, but does: {}",
                    path.join(" -> ")
                ));
            }
        }
    }
    for name in doc.keys() {
        if !graph.members.contains(name) {
            errors.push(format!(
                "ARCHITECTURE.md has an entry for {name}, which is not a workspace crate"
            ));
        }
    }
    errors
}

#[test]
fn the_dependency_graph_is_the_one_architecture_md_states() {
    let doc = parse(&architecture_md()).unwrap();
    let errors = check(&doc, &metadata());
    assert!(errors.is_empty(), "\n{}", errors.join("\n"));
}

#[test]
fn architecture_md_forbids_what_the_core_must_not_know() {
    let doc = parse(&architecture_md()).unwrap();
    let never = |name: &str| &doc[name].never;
    assert!(never("radix").contains("tokenizers"));
    assert!(never("radix-pjrt").contains("radix"));
    assert!(never("radix-fetch").contains("radix-pjrt"));
    // The op language knows nothing of the tracer, of PJRT or of MPI;
    // reading text needs no compiler.
    for name in ["radix", "radix-pjrt", "radix-mpi"] {
        assert!(never("radix-ir").contains(name), "{name}");
    }
    assert!(never("radix-text").contains("radix"));
}

/// The check fails when a crate gains a dependency, directly or through
/// another crate, that its entry forbids.
#[test]
fn a_forbidden_dependency_fails_the_check() {
    let doc = parse(&architecture_md()).unwrap();
    let graph = metadata();

    let mut direct = metadata();
    direct
        .uses
        .get_mut("radix")
        .unwrap()
        .insert("tokenizers".into());
    direct
        .edges
        .get_mut("radix")
        .unwrap()
        .insert("tokenizers".into());
    let errors = check(&doc, &direct);
    assert!(
        errors
            .iter()
            .any(|e| e.contains("radix depends on tokenizers")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e == "radix must never depend on tokenizers, but does: radix -> tokenizers"),
        "{errors:?}"
    );

    // Through another crate: radix-fetch on radix reaches radix-pjrt.
    let mut indirect = graph;
    indirect
        .edges
        .get_mut("radix-fetch")
        .unwrap()
        .insert("radix".into());
    let errors = check(&doc, &indirect);
    assert!(
        errors.iter().any(|e| e
            == "radix-fetch must never depend on radix-pjrt, but does: radix-fetch -> radix -> radix-pjrt"),
        "{errors:?}"
    );
}

#[test]
fn an_entry_that_lists_a_dependency_the_crate_lacks_fails_the_check() {
    let doc = parse(
        "## Crates\n\n`crates/radix-fetch` — fetching.\n*Uses:* `zip`, `serde`.\n\n## Next\n",
    )
    .unwrap();
    let mut graph = Graph::default();
    graph.members.insert("radix-fetch".into());
    graph
        .uses
        .insert("radix-fetch".into(), BTreeSet::from(["zip".to_string()]));
    assert_eq!(
        check(&doc, &graph),
        ["radix-fetch's *Uses:* list names serde, which it does not depend on"]
    );
    graph.members.insert("radix-new".into());
    assert!(check(&doc, &graph).contains(&"radix-new has no entry in ARCHITECTURE.md".to_string()));
}
