//! Prepares the crate's documentation for rustdoc (docs.rs): the README, which is the crate's
//! front page, and the design, safety and benchmark notes, which become the modules of
//! `quorum_lock::docs`. In the repository their links are to files (`docs/DESIGN.md`); in
//! rustdoc they must be to those modules, and the notes' untagged code blocks (traces,
//! tables of figures) are text, not Rust to test. Nothing else is built.

use std::path::Path;

fn main() {
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    for (source, target) in [
        ("README.md", "README.md"),
        ("docs/DESIGN.md", "DESIGN.md"),
        ("docs/SAFETY.md", "SAFETY.md"),
        ("BENCHMARKS.md", "BENCHMARKS.md"),
    ] {
        println!("cargo:rerun-if-changed={source}");
        let text = std::fs::read_to_string(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        std::fs::write(Path::new(&out).join(target), for_rustdoc(&text))
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

/// Links to the notes become links to their modules; images of the repository (not in the
/// package) are dropped; an untagged code block is `text`.
fn for_rustdoc(text: &str) -> String {
    let links = [
        ("](docs/DESIGN.md", "](crate::docs::design"),
        ("](DESIGN.md", "](crate::docs::design"),
        ("](docs/SAFETY.md", "](crate::docs::safety"),
        ("](SAFETY.md", "](crate::docs::safety"),
        ("](BENCHMARKS.md", "](crate::docs::benchmarks"),
        ("](../BENCHMARKS.md", "](crate::docs::benchmarks"),
        ("](../README.md", "](crate"),
    ];
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            if !in_code && trimmed == "```" {
                out.push_str(&line.replace("```", "```text"));
                out.push('\n');
                in_code = true;
                continue;
            }
            in_code = !in_code;
        }
        if !in_code && trimmed.starts_with("![") && trimmed.contains("](docs/bench/") {
            continue;
        }
        let mut line = line.to_string();
        if !in_code {
            for (from, to) in links {
                line = line.replace(from, to);
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}
