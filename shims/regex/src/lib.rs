//! `regex` as boon (the JSON Schema validator) uses it, on `regex-lite`.
//!
//! Patterns in schemas (`pattern`, `patternProperties`) are ECMA-262 regular expressions,
//! which boon translates; regex-lite then compiles them. What regex-lite leaves out is
//! Unicode classes (`\p{L}`) and Unicode-aware `\w`/`\d` — ECMA's `\w` and `\d` are ASCII
//! anyway. A schema whose pattern needs a Unicode class is refused as invalid, never
//! matched wrongly.

pub use regex_lite::*;
