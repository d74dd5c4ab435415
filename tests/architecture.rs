//! The folders of `src/` form no import cycle: each top-level module (a file or a folder of
//! `src/`) uses others only along a graph without cycles, read from the `crate::` paths of its
//! code (comments and doc links aside). The reference must not depend on a backend.
//! `generated.rs` is the data of `kernels.rs` (the table `cargo xtask gen` writes of the types
//! `kernels.rs` declares), so the two count as one module, `kernels`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module a top-level name of `src/` counts as (`generated` is part of `kernels`).
fn top(name: &str) -> String {
    if name == "generated" { "kernels" } else { name }.to_owned()
}

/// Each top-level module and the top-level modules its code names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let module = |path: &Path| {
        let first = path.strip_prefix(&src).unwrap().components().next().unwrap();
        top(first.as_os_str().to_string_lossy().trim_end_matches(".rs"))
    };
    let modules: BTreeSet<String> = files.iter().map(|f| module(f)).filter(|m| m != "lib" && m != "bin").collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
    for file in &files {
        let from = module(file);
        let Some(edges) = graph.get_mut(&from) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String =
                    line[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                let name = top(&name);
                if modules.contains(&name) && name != from {
                    edges.insert(name);
                }
            }
        }
    }
    graph
}

#[test]
fn src_has_no_import_cycle() {
    let graph = graph();
    // Depth-first search; a module met again while on the path closes a cycle.
    fn visit(m: &str, graph: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("import cycle: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_owned());
        for next in &graph[m] {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(m.to_owned());
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done);
    }
    assert!(graph["reference"].iter().all(|m| m == "types" || m == "error"), "{:?}", graph["reference"]);
    eprintln!("{graph:?}");
}
