//! Culture tags: what a run's `culture` and a definition's `instructionsByCulture` keys are —
//! well-formed BCP 47 language tags (RFC 5646: `tr`, `pt-BR`, `zh-Hant-TW`, `es-419`).

/// The longest accepted culture tag.
pub const MAX_CULTURE_LEN: usize = 35;

/// Whether `tag` is a well-formed BCP 47 language tag (grandfathered and private-use tags
/// included) of at most [`MAX_CULTURE_LEN`] characters. Well-formed, not looked up in the
/// subtag registry: a subtag registered after this build is not refused.
pub fn is_culture_tag(tag: &str) -> bool {
    tag.len() <= MAX_CULTURE_LEN && language_tags::LanguageTag::parse(tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn culture_tags_are_well_formed_bcp47() {
        for ok in ["en", "tr-TR", "tr-tr", "zh-Hant-TW", "pt-BR", "es-419", "de-CH-1996", "sr-Latn-RS", "x-klingon"] {
            assert!(is_culture_tag(ok), "{ok}");
        }
        for bad in ["", "e", "en_US", "en-", "-en", "en-US-US", "tr-a", "x", "not a culture", "toolonglanguage"] {
            assert!(!is_culture_tag(bad), "{bad}");
        }
        assert!(!is_culture_tag(&format!("en-{}", ["abcdefgh"; 5].join("-"))), "over 35 characters");
    }
}
