//! The MCP OAuth store's contract: a pending authorization is found by its state digest once
//! and never after its expiry, and one abandoned is purged once expired; tokens are kept per tenant and server, replaced by a refresh
//! only over the version it read (two refreshes of one version: exactly one wins), forgotten
//! once, and invisible to another tenant.

use chrono::Duration;

use super::fixtures::{a, b, t0};
use crate::error::StoreError;
use crate::mcp::McpServerName;
use crate::mcp::oauth::{McpOAuthTokens, OAuthClient, PendingAuthorization};
use crate::stores::Stores;

fn crm() -> McpServerName {
    McpServerName::parse("crm").unwrap()
}

fn pending(digest: &str) -> PendingAuthorization {
    PendingAuthorization {
        state_digest: digest.into(),
        tenant: a(),
        server: crm(),
        code_verifier: "verifier-secret-0123456789".into(),
        redirect_uri: "https://tracon.example/api/mcp-servers/oauth/callback".into(),
        client: OAuthClient { client_id: "client-1".into(), issued_secret: Some("issued-secret".into()) },
        token_endpoint: "https://as.example/token".into(),
        resource: "https://crm.example/mcp".into(),
        scopes: vec!["crm.read".into()],
        expires_at: t0() + Duration::minutes(10),
    }
}

fn tokens(access: &str, refresh: Option<&str>) -> McpOAuthTokens {
    McpOAuthTokens {
        access_token: access.into(),
        refresh_token: refresh.map(str::to_owned),
        expires_at: Some(t0() + Duration::hours(1)),
        scopes: vec!["crm.read".into()],
        client: OAuthClient { client_id: "client-1".into(), issued_secret: None },
        token_endpoint: "https://as.example/token".into(),
        resource: "https://crm.example/mcp".into(),
        version: 0,
        updated_at: t0(),
    }
}

pub async fn pending_authorizations_are_taken_once_and_never_after_expiry(s: Stores) {
    let o = &s.mcp_oauth;
    o.put_pending(&pending("d1")).await.unwrap();
    o.put_pending(&pending("d2")).await.unwrap();
    assert!(o.put_pending(&pending("d1")).await.is_err(), "a digest is pending once");
    assert_eq!(o.take_pending("nope", t0()).await.unwrap(), None);
    let taken = o.take_pending("d1", t0() + Duration::minutes(1)).await.unwrap();
    assert_eq!(taken, Some(pending("d1")), "read back whole, the verifier and issued secret too");
    assert_eq!(o.take_pending("d1", t0() + Duration::minutes(1)).await.unwrap(), None, "single use");
    // Expired: refused, and gone.
    assert_eq!(o.take_pending("d2", t0() + Duration::minutes(10)).await.unwrap(), None);
    assert_eq!(o.take_pending("d2", t0()).await.unwrap(), None, "an expired take still removes it");
    // One never completed is removed once expired, when another starts.
    let mut old = pending("abandoned");
    old.expires_at = t0() - Duration::minutes(1);
    o.put_pending(&old).await.unwrap();
    o.put_pending(&pending("d4")).await.unwrap();
    assert_eq!(o.take_pending("abandoned", t0() - Duration::minutes(5)).await.unwrap(), None, "purged");
    assert!(o.take_pending("d4", t0()).await.unwrap().is_some());

    let mut nul = pending("d3");
    nul.code_verifier = "x\u{0}".into();
    assert!(matches!(o.put_pending(&nul).await, Err(StoreError::InvalidText { .. })));
}

pub async fn oauth_tokens_are_kept_per_tenant_and_replaced_only_over_the_version_read(s: Stores) {
    let o = &s.mcp_oauth;
    assert_eq!(o.get_tokens(&a(), &crm()).await.unwrap(), None);
    let first = o.put_tokens(&a(), &crm(), &tokens("at-1", Some("rt-1"))).await.unwrap();
    assert_eq!(o.get_tokens(&a(), &crm()).await.unwrap(), Some(first.clone()));
    assert_eq!((first.access_token.as_str(), first.refresh_token.as_deref()), ("at-1", Some("rt-1")));

    // Another tenant sees, replaces and forgets nothing.
    assert_eq!(o.get_tokens(&b(), &crm()).await.unwrap(), None);
    assert_eq!(o.replace_tokens(&b(), &crm(), first.version, &tokens("x", None)).await.unwrap(), None);
    assert!(!o.delete_tokens(&b(), &crm()).await.unwrap());

    // A refresh over the version read wins; a second one over the same version loses.
    let rotated = o.replace_tokens(&a(), &crm(), first.version, &tokens("at-2", Some("rt-2"))).await.unwrap().unwrap();
    assert!(rotated.version > first.version);
    assert_eq!(rotated.refresh_token.as_deref(), Some("rt-2"));
    assert_eq!(o.replace_tokens(&a(), &crm(), first.version, &tokens("at-late", Some("rt-late"))).await.unwrap(), None);
    assert_eq!(o.get_tokens(&a(), &crm()).await.unwrap().unwrap().access_token, "at-2", "the rotation is not lost");

    // Concurrent refreshes of one version: exactly one is written.
    let (tenant, server) = (a(), crm());
    let (tx, ty) = (tokens("at-x", Some("rt-x")), tokens("at-y", Some("rt-y")));
    let (x, y) = futures::join!(
        o.replace_tokens(&tenant, &server, rotated.version, &tx),
        o.replace_tokens(&tenant, &server, rotated.version, &ty),
    );
    assert_eq!([x.unwrap().is_some(), y.unwrap().is_some()].iter().filter(|w| **w).count(), 1);

    // A new authorization replaces whatever was there.
    let again = o.put_tokens(&a(), &crm(), &tokens("at-3", None)).await.unwrap();
    assert!(again.version > rotated.version);
    assert_eq!(o.get_tokens(&a(), &crm()).await.unwrap().unwrap().refresh_token, None);
    o.put_tokens(&b(), &crm(), &tokens("b-token", None)).await.unwrap();
    assert!(o.delete_tokens(&a(), &crm()).await.unwrap());
    assert!(!o.delete_tokens(&a(), &crm()).await.unwrap());
    assert_eq!(o.get_tokens(&a(), &crm()).await.unwrap(), None);
    assert_eq!(o.get_tokens(&b(), &crm()).await.unwrap().unwrap().access_token, "b-token");
    assert!(matches!(o.put_tokens(&a(), &crm(), &tokens("a\u{0}", None)).await, Err(StoreError::InvalidText { .. })));
}
