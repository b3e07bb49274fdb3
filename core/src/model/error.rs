//! Provider failures, classified the way the spec's model-provider page says.
//!
//! | failure | kind | next fallback link tried |
//! |---|---|---|
//! | timeout (connect, first byte, idle stream) | `Timeout` | yes |
//! | the caller went away | `Canceled` | no |
//! | HTTP 401 / 403 | `Unauthorized` | no — it is a configuration mistake |
//! | HTTP 429 | `RateLimited` | yes |
//! | HTTP 5xx | `ServerError` | yes |
//! | transport failure without a status | `Transport` | yes |
//! | other HTTP 4xx | `Rejected` | no |
//! | a malformed response | `Protocol` | no |
//! | the provider's safety filter | `ContentFiltered` | no |
//! | the provider's circuit breaker is open (no call was made) | `BreakerOpen` | yes |
//!
//! A `429` or `503` may say when to come back (`Retry-After`): [`ProviderError::retry_after`].
//!
//! The upstream's own text (an error body, a socket error) is kept in `detail` for the log
//! and never reaches a response or a stored row.

use std::fmt;

/// What kind of failure a provider call ended in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderErrorKind {
    Timeout,
    Canceled,
    Unauthorized,
    RateLimited,
    ServerError,
    Transport,
    Rejected,
    Protocol,
    ContentFiltered,
    /// No call was made: the provider's circuit breaker is open (it failed too often in a row).
    BreakerOpen,
}

/// A failed model call.
#[derive(Debug, Clone)]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    /// The upstream HTTP status, when there was one.
    pub status: Option<u16>,
    /// A short, secret-free type name shown in display messages (`HttpStatusError`).
    pub type_name: &'static str,
    /// Upstream detail. Log it; never show or store it.
    pub detail: String,
    /// How long the provider asked to be left alone (`Retry-After` of a `429` or `503`).
    pub retry_after: Option<std::time::Duration>,
}

impl ProviderError {
    pub fn new(kind: ProviderErrorKind, type_name: &'static str, detail: impl Into<String>) -> Self {
        Self { kind, status: None, type_name, detail: detail.into(), retry_after: None }
    }

    pub fn timeout(detail: impl Into<String>) -> Self {
        Self::new(ProviderErrorKind::Timeout, "TimeoutError", detail)
    }

    pub fn canceled() -> Self {
        Self::new(ProviderErrorKind::Canceled, "Canceled", "the caller canceled the model call")
    }

    pub fn protocol(detail: impl Into<String>) -> Self {
        Self::new(ProviderErrorKind::Protocol, "ProtocolError", detail)
    }

    /// The stream ended before the provider said it was done: a transport failure, not an
    /// answer (`detail` says what was missing).
    pub fn stream_interrupted(detail: &str) -> Self {
        Self::new(ProviderErrorKind::Transport, "StreamInterrupted", format!("the stream ended before {detail}"))
    }

    pub fn content_filtered() -> Self {
        Self::new(
            ProviderErrorKind::ContentFiltered,
            "ContentFiltered",
            "the provider's content filter stopped the response",
        )
    }

    /// Classifies a non-success HTTP status. `body` is kept for the log only.
    pub fn from_status(status: u16, body: &str) -> Self {
        let kind = match status {
            401 | 403 => ProviderErrorKind::Unauthorized,
            408 => ProviderErrorKind::Timeout,
            429 => ProviderErrorKind::RateLimited,
            500..=599 => ProviderErrorKind::ServerError,
            _ => ProviderErrorKind::Rejected,
        };
        let snippet: String = body.chars().take(2_000).collect();
        Self {
            kind,
            status: Some(status),
            type_name: "HttpStatusError",
            detail: format!("HTTP {status}: {snippet}"),
            retry_after: None,
        }
    }

    /// The breaker of `provider` is open: nothing was sent.
    pub fn breaker_open(provider: &str, seconds_left: i64) -> Self {
        Self::new(
            ProviderErrorKind::BreakerOpen,
            "CircuitOpen",
            format!("the circuit breaker of '{provider}' is open for {} s more", seconds_left.max(0)),
        )
    }

    /// The same error with the `Retry-After` header's value (delay-seconds; an HTTP date or
    /// anything else is ignored).
    pub fn with_retry_after(mut self, header: Option<&str>) -> Self {
        self.retry_after =
            header.and_then(|v| v.trim().parse::<u64>().ok()).map(|s| std::time::Duration::from_secs(s.min(3_600)));
        self
    }

    /// The same error with every occurrence of `secret` in its detail replaced: providers
    /// quote back the credential they refused ("Incorrect API key provided: sk-…"), and the
    /// detail goes to the log.
    pub fn without_secret(mut self, secret: &str) -> Self {
        if !secret.is_empty() && self.detail.contains(secret) {
            self.detail = self.detail.replace(secret, "[redacted]");
        }
        self
    }

    /// Classifies a transport error. A timeout is a timeout, never a cancellation.
    pub fn from_reqwest(err: &reqwest::Error) -> Self {
        if err.is_timeout() {
            return Self::timeout(err.to_string());
        }
        if let Some(status) = err.status() {
            return Self::from_status(status.as_u16(), &err.to_string());
        }
        if err.is_decode() || err.is_body() {
            return Self::new(ProviderErrorKind::Transport, "HttpBodyError", err.to_string());
        }
        Self::new(ProviderErrorKind::Transport, "HttpRequestError", err.to_string())
    }

    /// Whether moving to the next fallback link could help.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ProviderErrorKind::Timeout
                | ProviderErrorKind::RateLimited
                | ProviderErrorKind::ServerError
                | ProviderErrorKind::Transport
                | ProviderErrorKind::BreakerOpen
        )
    }

    /// Whether trying the same provider again could help (everything that moves on, but an
    /// open breaker: that is the next link's turn).
    pub fn is_worth_retrying(&self) -> bool {
        self.is_retryable() && self.kind != ProviderErrorKind::BreakerOpen
    }

    /// Whether the failure says something about the provider's health, and so counts
    /// towards opening its circuit breaker: a timeout, a `5xx`, a broken connection. A `429`
    /// is the provider throttling this caller, a refusal is about the request, a content
    /// filter is a healthy provider answering: none of them count.
    pub fn counts_against_breaker(&self) -> bool {
        matches!(self.kind, ProviderErrorKind::Timeout | ProviderErrorKind::ServerError | ProviderErrorKind::Transport)
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Deliberately without `detail`: Display is what ends up in messages.
        match self.status {
            Some(s) => write!(f, "{} (HTTP {s})", self.type_name),
            None => f.write_str(self.type_name),
        }
    }
}

impl std::error::Error for ProviderError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_classify_as_the_spec_says() {
        assert_eq!(ProviderError::from_status(401, "").kind, ProviderErrorKind::Unauthorized);
        assert_eq!(ProviderError::from_status(403, "").kind, ProviderErrorKind::Unauthorized);
        assert_eq!(ProviderError::from_status(429, "").kind, ProviderErrorKind::RateLimited);
        assert_eq!(ProviderError::from_status(500, "").kind, ProviderErrorKind::ServerError);
        assert_eq!(ProviderError::from_status(503, "").kind, ProviderErrorKind::ServerError);
        assert_eq!(ProviderError::from_status(400, "").kind, ProviderErrorKind::Rejected);
        assert!(!ProviderError::from_status(401, "").is_retryable());
        let quoted = ProviderError::from_status(401, "Incorrect API key provided: sk-abc123. Check it.");
        let scrubbed = quoted.without_secret("sk-abc123");
        assert!(
            !scrubbed.detail.contains("sk-abc123") && scrubbed.detail.contains("[redacted]"),
            "{}",
            scrubbed.detail
        );
        assert!(ProviderError::from_status(429, "").is_retryable());
        assert!(ProviderError::from_status(502, "").is_retryable());
        assert!(ProviderError::timeout("x").is_retryable());
        assert!(!ProviderError::canceled().is_retryable());
    }

    #[test]
    fn display_never_carries_the_upstream_text() {
        let e = ProviderError::from_status(500, "db password=hunter2");
        assert!(!e.to_string().contains("hunter2"));
        assert!(e.detail.contains("hunter2"));
    }
}
