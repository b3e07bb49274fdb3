//! Serves `openapi.json` without its indentation: the committed file stays pretty-printed
//! for review, and the hosts (the Worker bundle above all) carry the compact text. Only
//! whitespace outside strings is dropped; every byte inside a string stays as it is.
//! Precompresses the chat widget, too (`build/widget.rs`).

#![allow(clippy::print_stdout)] // build-script output is how cargo is told what to watch

use std::path::PathBuf;

#[path = "build/widget.rs"]
mod widget;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo::rerun-if-changed=openapi.json");
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").ok_or("cargo sets CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("cargo sets OUT_DIR")?);
    let pretty = std::fs::read_to_string(manifest.join("openapi.json"))?;
    std::fs::write(out.join("openapi.min.json"), compact(&pretty))?;
    println!("cargo::rerun-if-changed={}", widget::SOURCE);
    widget::precompress(&manifest, &out)?;
    Ok(())
}

/// `json` without the whitespace between its tokens.
fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}
