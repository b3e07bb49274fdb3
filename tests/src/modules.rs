//! The module graph of a crate, read from its sources: which file names which (through
//! `crate::…`, `super::…` and `self::…` paths, in `use` trees and in code), and the import
//! circles in it. A test of each crate keeps it free of circles, so layers stay layers.
//!
//! Text is read, not compiled: a path is resolved to the deepest module file that exists
//! (`crate::runs::store::RunRecord` → `runs/store.rs`, else `runs/mod.rs` or `runs.rs`).
//! Comments and string literals are skipped; test modules (`#[cfg(test)] mod tests { … }`
//! at the end of a file) are left out, since tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// File → the files it names.
pub type Graph = BTreeMap<PathBuf, BTreeSet<PathBuf>>;

/// The graph of the crate whose sources are under `src` (its `lib.rs` is the root).
pub fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect(src, &mut files);
    let mut out = Graph::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = strip(&text);
        let file_module = module_path(src, file);
        let inline = inline_modules(&code);
        let mut targets = BTreeSet::new();
        for (at, path) in paths(&code) {
            // `super::` and `self::` inside `mod name { … }` are relative to that module.
            let mut module = file_module.clone();
            module
                .extend(inline.iter().filter(|(start, end, _)| (*start..*end).contains(&at)).map(|(.., n)| n.clone()));
            let absolute = match path.first().map(String::as_str) {
                Some("crate") => path[1..].to_vec(),
                Some("super") => {
                    let mut base = module.clone();
                    let mut rest = &path[..];
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.extend(rest.iter().cloned());
                    base
                }
                Some("self") => {
                    let mut base = module.clone();
                    base.extend(path[1..].iter().cloned());
                    base
                }
                _ => continue,
            };
            if let Some(target) = resolve(src, &absolute)
                && target != *file
            {
                targets.insert(target);
            }
        }
        out.insert(file.clone(), targets);
    }
    out
}

/// Every import circle (strongly connected set of two or more files), each sorted.
pub fn circles(graph: &Graph) -> Vec<Vec<PathBuf>> {
    // Tarjan's algorithm.
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else { continue };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// One circle's edges, for a failure message: `a.rs -> b.rs` for each edge inside it.
pub fn describe(graph: &Graph, circle: &[PathBuf], root: &Path) -> String {
    let inside: BTreeSet<&PathBuf> = circle.iter().collect();
    let short = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let mut lines = Vec::new();
    for from in circle {
        for to in graph.get(from).into_iter().flatten().filter(|t| inside.contains(t)) {
            lines.push(format!("  {} -> {}", short(from), short(to)));
        }
    }
    lines.join("\n")
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "main.rs") {
            out.push(path);
        }
    }
}

/// The module path of a file (`runs/store.rs` → `[runs, store]`; `runs/mod.rs` → `[runs]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_owned();
        if stem != "mod" && stem != "lib" {
            parts.push(stem);
        }
    }
    parts
}

/// The deepest module file a path names.
fn resolve(src: &Path, path: &[String]) -> Option<PathBuf> {
    for n in (0..=path.len()).rev() {
        let dir: PathBuf = path[..n].iter().collect();
        if n == 0 {
            return Some(src.join("lib.rs"));
        }
        let file = src.join(&dir).with_extension("rs");
        if file.is_file() {
            return Some(file);
        }
        let module = src.join(&dir).join("mod.rs");
        if module.is_file() {
            return Some(module);
        }
    }
    None
}

/// The code without comments, string and char literals, and the trailing test module.
fn strip(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let bytes = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &code[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |e| e + 2);
        } else if let Some(raw) = rest.strip_prefix("r#\"") {
            i += raw.find("\"#").map_or(rest.len(), |e| e + 5);
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() {
                match rest.as_bytes()[j] {
                    b'\\' => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            i += (j + 1).min(rest.len());
            out.push_str("\"\"");
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The inline modules of the code (`mod name { … }`), outermost first: where each one's
/// body starts and ends, and its name.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if code[..at].chars().last().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + 4..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = at + 4 + (rest.len() - after.len());
        let mut depth = 0usize;
        let mut end = code.len();
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end, name));
    }
    out
}

/// Every `crate::…`, `super::…` and `self::…` path in the code, `use` trees expanded, with
/// where it was written.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    // `use` trees: expand braces.
    for (start, _) in code.match_indices("use ") {
        let before = code[..start].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = code[start..].find(';') else { continue };
        let tree: String = code[start + 4..start + end].chars().filter(|c| !c.is_whitespace()).collect();
        let mut expanded = Vec::new();
        expand(&tree, &mut Vec::new(), &mut expanded);
        out.extend(expanded.into_iter().map(|p| (start, p)));
    }
    // Paths written in code.
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String =
                code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            let parts: Vec<String> = path.split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect();
            out.push((at, parts));
        }
    }
    out
}

fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree.find('{') {
        None => {
            let mut path = prefix.clone();
            path.extend(
                tree.split("::").filter(|p| !p.is_empty()).map(|p| p.split(" as ").next().unwrap_or(p).to_owned()),
            );
            out.push(path);
        }
        Some(open) => {
            let head: Vec<String> = tree[..open].split("::").filter(|p| !p.is_empty()).map(str::to_owned).collect();
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let len = prefix.len();
            prefix.extend(head);
            let mut depth = 0;
            let mut part = String::new();
            for c in inner.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&part, prefix, out);
                        part.clear();
                        continue;
                    }
                    _ => {}
                }
                part.push(c);
            }
            if !part.is_empty() {
                expand(&part, prefix, out);
            }
            prefix.truncate(len);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tracon-modules-{}", uuid::Uuid::new_v4()));
        for (path, text) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_circle_is_found_and_an_inline_modules_super_is_its_own_file() {
        let src = crate_of(&[
            ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            ("b.rs", "pub struct B(crate::a::A);\n"),
            // `super::` inside `mod inner { … }` is c.rs itself, not lib.rs.
            ("c.rs", "pub struct C;\nmod inner {\n    use super::C;\n}\n"),
        ]);
        let graph = graph(&src);
        let circles = circles(&graph);
        assert_eq!(circles.len(), 1, "{circles:?}");
        assert_eq!(circles[0], vec![src.join("a.rs"), src.join("b.rs")]);
        assert!(graph[&src.join("c.rs")].is_empty(), "{graph:?}");
        std::fs::remove_dir_all(src).unwrap();
    }
}
