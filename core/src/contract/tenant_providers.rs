//! The tenant provider store's contract: a tenant's credential bindings (by provider,
//! replaced in place, removed once) and its egress policy, each invisible to other tenants.

use chrono::Duration;

use super::fixtures::{a, b, t0};
use crate::error::StoreError;
use crate::model::byok::{ProviderBinding, ProviderEgress};
use crate::stores::Stores;

fn binding(provider: &str, name: &str, endpoint: Option<&str>) -> ProviderBinding {
    ProviderBinding {
        provider: provider.into(),
        api_key_configuration_name: name.into(),
        endpoint: endpoint.map(str::to_owned),
        updated_at: t0(),
    }
}

pub async fn provider_bindings_and_egress_are_kept_per_tenant(s: Stores) {
    let p = &s.tenant_providers;
    assert!(p.bindings(&a()).await.unwrap().is_empty());
    p.put_binding(&a(), &binding("openai", "Tracon:ProviderKeys:a:OpenAI", None)).await.unwrap();
    p.put_binding(&a(), &binding("anthropic", "Tracon:ProviderKeys:a:Claude", Some("https://gw.example/v1")))
        .await
        .unwrap();
    let listed = p.bindings(&a()).await.unwrap();
    assert_eq!(listed.iter().map(|b| b.provider.as_str()).collect::<Vec<_>>(), ["anthropic", "openai"]);
    assert_eq!(listed[0], binding("anthropic", "Tracon:ProviderKeys:a:Claude", Some("https://gw.example/v1")));
    // A second write for a provider replaces the first.
    let mut moved = binding("openai", "Tracon:ProviderKeys:a:OpenAI2", None);
    moved.updated_at = t0() + Duration::seconds(5);
    p.put_binding(&a(), &moved).await.unwrap();
    let listed = p.bindings(&a()).await.unwrap();
    assert_eq!((listed.len(), &listed[1]), (2, &moved));
    assert!(p.bindings(&b()).await.unwrap().is_empty(), "another tenant sees none");
    assert!(!p.delete_binding(&b(), "openai").await.unwrap());
    assert!(p.delete_binding(&a(), "openai").await.unwrap());
    assert!(!p.delete_binding(&a(), "openai").await.unwrap());
    assert!(matches!(
        p.put_binding(&a(), &binding("openai", "bad\u{0}", None)).await,
        Err(StoreError::InvalidText { .. })
    ));

    assert_eq!(p.egress(&a()).await.unwrap(), None, "no policy: unrestricted");
    let policy = ProviderEgress { allowed_providers: vec!["anthropic".into(), "openai".into()], updated_at: t0() };
    p.put_egress(&a(), &policy).await.unwrap();
    assert_eq!(p.egress(&a()).await.unwrap(), Some(policy));
    let narrower = ProviderEgress { allowed_providers: vec!["openai".into()], updated_at: t0() + Duration::seconds(1) };
    p.put_egress(&a(), &narrower).await.unwrap();
    assert_eq!(p.egress(&a()).await.unwrap(), Some(narrower));
    assert_eq!(p.egress(&b()).await.unwrap(), None);
    assert!(!p.delete_egress(&b()).await.unwrap());
    assert!(p.delete_egress(&a()).await.unwrap());
    assert_eq!(p.egress(&a()).await.unwrap(), None);
}
