//! `sqlx::migrate!` embeds `migrations/` at compile time but cannot tell cargo to watch the
//! folder on stable Rust: without this, adding or editing a migration would leave a binary
//! built before it carrying the old list.

#![allow(clippy::print_stdout)] // build-script output is how cargo is told what to watch

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
