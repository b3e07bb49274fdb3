//! `GET /embed.js`: the embeddable chat widget (`handlers/assets/embed.js`), served as
//! static bytes by every host.
//!
//! The route is open (`crate::access::requirement`): a `<script src>` carries no
//! `Authorization` header, and the file holds no secret — the page supplies its own
//! `RunsWrite` API key in `data-api-key`. The widget's calls to the run endpoint are
//! cross-origin, so the embedding page's origin must be in `Tracon:AllowedOrigins`.
//! `scripts/widget-size.sh` keeps the file within its 15 KB (gzipped) budget.
//!
//! Three representations: the script as committed, and its brotli and gzip copies, made once
//! at build time (`handlers/build/widget.rs`), chosen by `Accept-Encoding` (`Vary` says so).
//! Each has its own strong `ETag`; a matching `If-None-Match` is answered `304 Not Modified`,
//! so a page view after the five-minute `max-age` revalidates without the body.
//!
//! The Worker offers only the identity copy: the Workers runtime compresses a response by its
//! `Content-Encoding` itself (`encodeBody: "automatic"`), so a precompressed body would be
//! compressed twice, and Cloudflare's edge already compresses JavaScript for the clients that
//! accept it.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The widget, as committed: hand-written JavaScript, no build step.
pub const EMBED_JS: &str = include_str!("../../assets/embed.js");

// The Worker serves no compressed copy, so it reads only the identity tag.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
mod tags {
    include!(concat!(env!("OUT_DIR"), "/embed_js.rs"));
}

/// A five-minute cache: a widget update reaches pages soon, without a request per page view.
const CACHE_CONTROL: &str = "public, max-age=300";

/// One representation of the script.
struct Variant {
    /// The `Content-Encoding` token; `None` for the script as it is.
    coding: Option<&'static str>,
    etag: &'static str,
    body: &'static [u8],
}

const IDENTITY: Variant = Variant { coding: None, etag: tags::ETAG, body: EMBED_JS.as_bytes() };

/// The compressed copies, in the order the server prefers them when a client accepts both
/// equally: brotli is the smaller.
#[cfg(not(target_arch = "wasm32"))]
const ENCODED: &[Variant] = &[
    Variant { coding: Some("br"), etag: tags::ETAG_BR, body: include_bytes!(concat!(env!("OUT_DIR"), "/embed.js.br")) },
    Variant {
        coding: Some("gzip"),
        etag: tags::ETAG_GZIP,
        body: include_bytes!(concat!(env!("OUT_DIR"), "/embed.js.gz")),
    },
];
#[cfg(target_arch = "wasm32")]
const ENCODED: &[Variant] = &[];

/// The embeddable chat widget script (no authentication required).
#[utoipa::path(get, path = "/embed.js", tag = "widget", security(()),
    responses(
        (status = 200, description = "The widget's JavaScript: brotli or gzip when `Accept-Encoding` allows (`Content-Encoding` says which), with a strong `ETag` and `Vary: Accept-Encoding`", content_type = "text/javascript", body = String),
        (status = 304, description = "Not modified: `If-None-Match` names the `ETag` of the copy this request would get"),
    ))]
pub async fn embed_js(request: HeaderMap) -> Response {
    let variant = choose(request.get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).unwrap_or(""));
    let mut headers = HeaderMap::with_capacity(6);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(CACHE_CONTROL));
    headers.insert(header::ETAG, HeaderValue::from_static(variant.etag));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Some(tags) = request.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok())
        && none_match_fails(tags, variant.etag)
    {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Some(coding) = variant.coding {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding));
    }
    (headers, variant.body).into_response()
}

/// The copy for an `Accept-Encoding` value (RFC 9110, 12.5.3): the highest `q` among the
/// copies it accepts, compression winning a tie. `*` stands for every coding it does not
/// name. Identity, unnamed, is acceptable unless `*;q=0` refuses it, but after any coding
/// the client names (`gzip;q=0.1` still gets gzip); it is also what a client gets when it
/// accepts nothing we have.
fn choose(accept: &str) -> &'static Variant {
    let mut offers: Vec<(&str, f32)> = Vec::new();
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim();
        if coding.is_empty() {
            continue;
        }
        let mut q = Some(1.0);
        for param in parts {
            if let Some((name, value)) = param.split_once('=')
                && name.trim().eq_ignore_ascii_case("q")
            {
                q = value.trim().parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q));
            }
        }
        // An element whose weight does not parse is ignored, not guessed at.
        if let Some(q) = q {
            offers.push((coding, q));
        }
    }
    let named = |coding: &str| {
        offers
            .iter()
            .find(|(c, _)| c.eq_ignore_ascii_case(coding) || (coding == "gzip" && c.eq_ignore_ascii_case("x-gzip")))
    };
    let star = offers.iter().find(|(c, _)| *c == "*").map(|(_, q)| *q);
    let weight = |coding: &str| match named(coding) {
        Some((_, q)) => *q,
        None => star.unwrap_or(if coding == "identity" { 0.001 } else { 0.0 }),
    };
    let mut best = (&IDENTITY, weight("identity"));
    for variant in ENCODED {
        let q = weight(variant.coding.unwrap_or("identity"));
        // Strictly better, or as good as identity and smaller.
        if q > best.1 || (q > 0.0 && q == best.1 && best.0.coding.is_none()) {
            best = (variant, q);
        }
    }
    best.0
}

/// Whether `If-None-Match` fails for a representation tagged `etag` — the condition is false,
/// so a GET is answered 304. It uses the weak comparison (RFC 9110, 13.1.2): `W/"x"` matches
/// `"x"`.
fn none_match_fails(tags: &str, etag: &str) -> bool {
    tags.trim() == "*" || tags.split(',').any(|tag| tag.trim().trim_start_matches("W/") == etag)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn coding(accept: &str) -> Option<&'static str> {
        choose(accept).coding
    }

    #[test]
    #[cfg(not(target_arch = "wasm32"))]
    fn accept_encoding_picks_the_best_copy_the_client_takes() {
        assert_eq!(coding(""), None);
        assert_eq!(coding("gzip"), Some("gzip"));
        assert_eq!(coding("x-gzip"), Some("gzip"));
        assert_eq!(coding("gzip, deflate, br, zstd"), Some("br"));
        assert_eq!(coding("GZIP;Q=1, BR;q=0.5"), Some("gzip"));
        assert_eq!(coding("br;q=0, gzip;q=0.1"), Some("gzip"));
        assert_eq!(coding("*"), Some("br"));
        assert_eq!(coding("*;q=0.5, br;q=0"), Some("gzip"));
        assert_eq!(coding("identity;q=1, gzip;q=0.5"), None);
        assert_eq!(coding("gzip;q=0, br;q=0"), None);
        // Nothing acceptable at all: the script as it is rather than nothing.
        assert_eq!(coding("*;q=0"), None);
        assert_eq!(coding("deflate"), None);
        // An unreadable weight drops the element rather than guessing.
        assert_eq!(coding("br;q=high, gzip"), Some("gzip"));
        assert_eq!(coding("br;q=2"), None);
    }

    #[test]
    fn if_none_match_compares_weakly_and_takes_lists_and_a_star() {
        assert!(none_match_fails("\"abc\"", "\"abc\""));
        assert!(none_match_fails("W/\"abc\"", "\"abc\""));
        assert!(none_match_fails("\"x\", \"abc\"", "\"abc\""));
        assert!(none_match_fails("*", "\"abc\""));
        assert!(!none_match_fails("\"abc-gzip\"", "\"abc\""));
        assert!(!none_match_fails("abc", "\"abc\""));
        assert!(!none_match_fails("", "\"abc\""));
    }
}
