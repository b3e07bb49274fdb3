//! The chat widget's precompressed copies, made once at build time on the build machine:
//! `GET /embed.js` (`src/meta/widget.rs`) serves these bytes as they are, so no request
//! compresses anything and no host — the Worker's wasm bundle least of all — carries an
//! encoder. Writes to `OUT_DIR`: `embed.js.gz` (gzip, level 9), `embed.js.br` (brotli,
//! quality 11) and `embed_js.rs`, the three representations' strong `ETag`s.

use std::error::Error;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The widget's source, relative to the crate.
pub const SOURCE: &str = "assets/embed.js";

pub fn precompress(manifest: &Path, out: &Path) -> Result<(), Box<dyn Error>> {
    let js = std::fs::read(manifest.join(SOURCE))?;

    // flate2 writes a zero modification time: the same source gives the same bytes.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&js)?;
    std::fs::write(out.join("embed.js.gz"), gz.finish()?)?;

    let mut br = Vec::new();
    {
        // A 4 KiB buffer, quality 11 (the smallest output), a 4 MiB window.
        let mut writer = brotli::CompressorWriter::new(&mut br, 4096, 11, 22);
        writer.write_all(&js)?;
        writer.flush()?;
    }
    std::fs::write(out.join("embed.js.br"), br)?;

    // The source's digest names every representation, and each coding has its own tag, as a
    // strong validator must (RFC 9110, 8.8.3): a cache never takes one copy for another.
    let digest = Sha256::digest(&js);
    let mut hex = String::with_capacity(32);
    for b in &digest[..16] {
        write!(hex, "{b:02x}")?;
    }
    std::fs::write(
        out.join("embed_js.rs"),
        format!(
            "/// The identity copy's `ETag`.\npub const ETAG: &str = \"\\\"{hex}\\\"\";\n\
             /// The gzip copy's `ETag`.\npub const ETAG_GZIP: &str = \"\\\"{hex}-gzip\\\"\";\n\
             /// The brotli copy's `ETag`.\npub const ETAG_BR: &str = \"\\\"{hex}-br\\\"\";\n"
        ),
    )?;
    Ok(())
}
